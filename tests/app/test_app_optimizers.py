"""The app's lbfgs, newton and lm optimizers: poly3 to its exact optimum, logging, stop rule,
config errors for models they do not fit, and compile=true (slow)."""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.tasks.poly3_optimum import exact_poly3_optimum
from fitting.train.run import run
from tests.helpers.app_config import make_cfg

REPO = Path(__file__).resolve().parents[2]
OPTIMIZERS = ["lbfgs", "newton", "lm"]
IMPLS = ["custom", "builtin"]
MAX_STEPS = 50
REL_GAP = 1e-6
# One figure (at the end) per run is enough here.
QUIET = ["log.figure_every=0", "log.every=1"]  # every step: the tests read whole curves


class Fit(NamedTuple):
    """What a run left: the loss `run` returned, its TensorBoard events, its log messages."""

    loss: float
    events: EventAccumulator
    log: list[str]


class Messages(logging.Handler):
    """Collects the messages logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="session")
def fit(tmp_path_factory):
    """`fit(*overrides)`: `run` with `overrides`, once per session (a Fit)."""

    @functools.cache
    def fit_once(*overrides: str) -> Fit:
        out = tmp_path_factory.mktemp("run")
        root, handler = logging.getLogger(), Messages()
        level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            loss = run(make_cfg(*overrides, *QUIET), out)
        finally:
            root.removeHandler(handler)
            root.setLevel(level)
        acc = EventAccumulator(str(out), size_guidance={"scalars": 0}).Reload()
        return Fit(loss, acc, handler.messages)

    return fit_once


def curve(acc: EventAccumulator, tag: str) -> dict[int, float]:
    """step -> value of a scalar tag."""
    return {e.step: e.value for e in acc.Scalars(tag)}


def final(acc: EventAccumulator, name: str) -> float:
    """The run's final number `name`, as results.json in its run dir holds it."""
    return json.loads((Path(acc.path) / "results.json").read_text())[name]


def last_grad_norm(acc: EventAccumulator) -> float:
    """‖∇loss‖ at the parameters the last step started from (optim/grad_norm of that step)."""
    norms = curve(acc, "optim/grad_norm")
    return norms[max(norms)]


def last_change(messages: list[str]) -> float:
    """The last step's relative change of the loss, as the closing convergence line says it."""
    line = next(m for m in messages if m.startswith("convergence:"))
    found = re.search(r"the last step (lowered|raised) the loss by (\S+) \(relative\)", line)
    assert found, line
    return float(found[2]) * (-1 if found[1] == "lowered" else 1)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_poly3_float64_reaches_the_exact_optimum(fit, optimizer, impl):
    best = exact_poly3_optimum(torch.float64).loss
    loss, acc, messages = fit(f"optimizer={optimizer}", f"impl={impl}", "dtype=float64")
    # The task's budget is 2000 steps; the stop rule ends the run once converged. Measured:
    # lbfgs 17 steps, newton and lm 9.
    steps = sorted(curve(acc, "loss/train"))
    assert steps == list(range(len(steps))) and len(steps) <= MAX_STEPS
    assert final(acc, "steps") == len(steps)
    # run() returns the last step's loss (before its update) in full precision.
    assert loss == pytest.approx(best, rel=1e-12)
    # The loss at the final parameters: measured gap −4e-16 (rounding of Σr²). The gradient
    # where the last step started: ‖∇F‖ ~1e-7 for lbfgs (its line search can resolve no
    # further decrease) and ~1e-12 for newton and lm, from 6.8e3 at the start.
    assert -1e-13 <= final(acc, "rel_gap") <= REL_GAP
    assert last_grad_norm(acc) <= 1e-6
    assert abs(last_change(messages)) <= 1e-13
    optimum = exact_poly3_optimum(torch.float64).params()
    for name, value in optimum.items():
        assert final(acc, name) == pytest.approx(value, rel=1e-6, abs=1e-8), name
    # Within 1e-6 of the optimum well before the end (the "≤ 50 iterations").
    gaps = [(v - best) / best for _, v in sorted(curve(acc, "loss/train").items())]
    reached = next(i for i, gap in enumerate(gaps) if gap <= REL_GAP)
    assert reached < len(gaps) and max(gaps[reached:]) <= REL_GAP


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_custom_and_builtin_give_the_same_fit(fit, optimizer):
    custom = fit(f"optimizer={optimizer}", "impl=custom", "dtype=float64")
    builtin = fit(f"optimizer={optimizer}", "impl=builtin", "dtype=float64")
    assert custom.loss == pytest.approx(builtin.loss, rel=1e-12)
    # Same number of steps, same path (TensorBoard keeps float32 values).
    c, b = curve(custom.events, "loss/train"), curve(builtin.events, "loss/train")
    assert c.keys() == b.keys()
    assert max(abs(c[s] - b[s]) / b[s] for s in c) <= 1e-6
    for name in "abcd":
        assert final(custom.events, name) == pytest.approx(
            final(builtin.events, name), rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_poly3_float32_reaches_its_floor(fit, optimizer, impl):
    """float32 (the app's default dtype) has its own optimum: that of the rounded grid and sin
    values. The floor, measured for all three and both impls: the float32 loss ends 2.8e-8
    below the exact optimum (rounding of the float32 sum of 2000 squares), the float32
    parameters are 1.4e-13 .. 1.9e-13 above it when their loss is evaluated in float64, and the
    float32 gradient norm stays at 4e-4 .. 5e-4 (rounding of its 2000-term sums)."""
    best = exact_poly3_optimum(torch.float32).loss
    loss, acc, _ = fit(f"optimizer={optimizer}", f"impl={impl}")
    assert len(curve(acc, "loss/train")) <= MAX_STEPS  # measured 15 (lbfgs), 8 (newton, lm)
    assert abs(loss - best) / best <= REL_GAP
    assert final(acc, "optimum_loss") == pytest.approx(best, rel=1e-7)
    assert -1e-13 <= final(acc, "rel_gap") <= 1e-11
    assert last_grad_norm(acc) <= 1e-2


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_per_step_logging(fit, optimizer):
    acc = fit(f"optimizer={optimizer}", "impl=custom", "dtype=float64").events
    scalars = set(acc.Tags()["scalars"])
    # optim/evals: the step's loss+gradient evaluations (lbfgs: those of its line search).
    every_step = {"loss/train", "optim/grad_norm", "optim/evals", "params/a", "params/b",
                  "params/c", "params/d"}
    if optimizer != "lbfgs":
        every_step |= {"optim/damping", "optim/rel_step"}
    assert every_step <= scalars
    steps = sorted(curve(acc, "loss/train"))
    for tag in every_step:
        assert sorted(curve(acc, tag)) == steps, tag
    # The gradient norm is that at the step's starting point for every optimizer, lbfgs too
    # (its line search leaves a trial point's gradient in .grad): the same start, the same norm.
    reference = fit("optimizer=newton", "impl=custom", "dtype=float64").events
    start = curve(reference, "optim/grad_norm")[0]
    assert curve(acc, "optim/grad_norm")[0] == pytest.approx(start, rel=1e-6)
    assert start == pytest.approx(6.83e3, rel=1e-3)
    assert all(v >= 1 for v in curve(acc, "optim/evals").values())
    if optimizer != "lbfgs":
        assert all(v >= 0 for v in curve(acc, "optim/damping").values())
    if optimizer == "newton":
        # Damped away from the optimum (measured λ = 1 at the start), pure Newton (λ = 0) at
        # the end: quadratic convergence.
        damping = curve(acc, "optim/damping")
        assert damping[0] > 0 and damping[max(damping)] == 0


def test_steps_budget_and_stop_rule(fit):
    # python train.py optimizer=lm: the task's 2000 steps are the budget, the stop rule ends it.
    cfg = make_cfg("optimizer=lm")
    assert (cfg.steps, cfg.optimizer.stop.patience, cfg.optimizer.stop.rtol) == (2000, 3, None)
    assert make_cfg().optimizer.stop.patience == 0  # gd runs all its steps (the tutorial)
    assert make_cfg("task=mlp").optimizer.stop.patience == 0  # adam too
    # An explicit steps= is the budget: fewer steps than convergence needs are all run.
    acc = fit("optimizer=lm", "steps=4").events
    assert sorted(curve(acc, "loss/train")) == [0, 1, 2, 3] and final(acc, "steps") == 4
    # stop.patience=0 runs the whole budget.
    acc = fit("optimizer=newton", "steps=12", "optimizer.stop.patience=0").events
    assert len(curve(acc, "loss/train")) == 12


def test_tutorial_run_reports_its_distance_to_the_optimum(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    loss = run(make_cfg("log.figure_every=0", "log.every=100"), tmp_path)
    assert round(loss, 4) == 8.9436
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    # The "1.4 % above the least-squares optimum".
    assert final(acc, "rel_gap") == pytest.approx(0.01433, abs=5e-5)
    assert final(acc, "steps") == 2000
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("convergence:")]
    assert len(lines) == 1
    assert lines[0].startswith("convergence: ran all 2000 steps; the last step lowered the loss by ")
    assert "relative above the exact optimum 8.8171675" in lines[0]


def test_second_order_run_says_it_converged(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    run(make_cfg("optimizer=newton", "dtype=float64", *QUIET), tmp_path)
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "optimizer=newton damping=0 max_params=1000 steps=2000" in messages
    assert "convergence: stopped as converged after 9 of 2000 steps" in messages
    assert "above the exact optimum 8.81716541001" in messages


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["task=mlp", "optimizer=newton"],
            "optimizer=newton needs an n×n matrix but the model has 4353 parameters, more "
            "than max_params=1000; use optimizer=lbfgs or adam",
        ),
        (
            ["task=mlp", "optimizer=lm"],
            "optimizer=lm needs an n×n matrix but the model has 4353 parameters, more than "
            "max_params=1000",
        ),
        (
            ["task=cnn", "optimizer=newton", "task.n_train=48", "task.n_val=16", "task.batch_size=8"],
            "optimizer=newton needs an n×n matrix but the model has 67132 parameters",
        ),
        (
            ["task=cnn", "optimizer=lm", "optimizer.max_params=100000", "task.n_train=48",
             "task.n_val=16", "task.batch_size=8"],
            "optimizer=lm needs residuals that are a pure function of the parameters, but the "
            "cnn model updates state in training (buffer features.0.1.running_mean",
        ),
        (["optimizer=lbfgs", "optimizer.max_eval=1"], "optimizer.max_eval must be >= 2"),
        (["optimizer=lm", "optimizer.stop.patience=-1"], "optimizer.stop.patience must be >= 0"),
    ],
)
def test_unsuitable_model_is_a_config_error(overrides, message, tmp_path):
    with pytest.raises(ValueError) as info:
        run(make_cfg(*overrides), tmp_path)
    assert message in str(info.value)
    assert not list(tmp_path.glob("events.out.tfevents.*"))  # refused before any training


def test_second_order_fits_a_small_mlp(tmp_path):
    """newton and lm are for models of few parameters, not only poly3: an MLP 1-8-8-1 (97
    parameters, mean reduction) with lm, a few steps."""
    overrides = ["task=mlp", "optimizer=lm", "task.hidden=[8,8]", "task.n_points=64", "steps=5"]
    loss = run(make_cfg(*overrides, *QUIET), tmp_path)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    losses = curve(acc, "loss/train")
    assert math.isfinite(loss) and losses[4] < losses[0] / 2
    assert "optim/damping" in acc.Tags()["scalars"]


# --- python train.py and compile=true (slow) -------------------------------------------------


@pytest.mark.slow
def test_train_py_reports_the_config_error(tmp_path, train_cli):
    """What the user sees: one line naming the problem, no traceback, exit status 2."""
    proc = train_cli("task=mlp", "optimizer=newton", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert (
        "config error: optimizer=newton needs an n×n matrix but the model has 4353 parameters, "
        "more than max_params=1000; use optimizer=lbfgs or adam for this model"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ["steps=5"],
        ["task=mlp", "steps=5", "task.n_points=64", "task.hidden=[16,16]", "log.every=1"],
        ["optimizer=lbfgs", "steps=5"],
    ],
)
def test_compile_gives_the_eager_losses(fit, overrides):
    """compile=true: the loop's forward runs the inductor-compiled model, same losses."""
    torch._dynamo.reset()
    eager = fit(*overrides).events
    compiled = fit(*overrides, "compile=true").events
    e, c = curve(eager, "loss/train"), curve(compiled, "loss/train")
    assert e.keys() == c.keys() and len(e) == 5
    # Measured: identical for sgd and adam, 2e-7 for lbfgs (float32, inductor's own kernels).
    worst = max(abs(c[s] - e[s]) / abs(e[s]) for s in e)
    assert worst <= 1e-6, f"largest relative difference {worst:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["newton", "lm"])
def test_compile_with_second_order_optimizers(fit, optimizer):
    """newton and lm differentiate the eager model (torch.func does not go through compiled
    code); the compiled one computes the loop's loss and gradient. Same fit as eager."""
    torch._dynamo.reset()
    best = exact_poly3_optimum(torch.float64).loss
    loss, acc, _ = fit(f"optimizer={optimizer}", "dtype=float64", "compile=true")
    assert loss == pytest.approx(best, rel=1e-12)
    assert len(curve(acc, "loss/train")) <= MAX_STEPS
    assert last_grad_norm(acc) <= 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("task", ["poly3", "mlp"])
def test_task_models_compile_without_graph_breaks(task, impl):
    from fitting.tasks import TASKS, build_task
    from fitting.train.ops import model_ops, resolve_ops

    cfg = make_cfg(f"task={task}", f"impl={impl}", "task.n_points=64")
    cpu = torch.device("cpu")
    ops = model_ops(resolve_ops(cfg, TASKS[task].slots, cpu, torch.float32))
    built = build_task(cfg.task, ops, cpu, torch.float32, 0)
    x, _ = built.batch(0)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(built.model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
