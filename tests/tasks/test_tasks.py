"""Each task as Hydra builds it from conf/task/<name>.yaml: its data, model, numbers and checks."""

from __future__ import annotations

import functools
import logging
import math
import re
from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from fitting.slots import SLOTS
from fitting.tasks import TASKS
from fitting.tasks.optimum import TUTORIAL_OPTIMUM_LOSS, cubic_to_poly3, poly3_optimum
from models.cnn import CurveCNN
from models.mlp import MLP
from models.ops import legendre_p3_reference
from models.poly3 import TUTORIAL_START, Poly3
from tests.optim.tutorial import LegendrePolynomial3
from tests.train.helpers import go

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CONF = Path(__file__).resolve().parents[2] / "conf"
SMALL_CNN = {"n_train": 64, "n_val": 16, "batch_size": 8}
SMALL_FORECAST = {"n_train": 64, "n_val": 8, "batch_size": 4, "vocab": 64, "context": 8,
                  "horizon": 3, "width": 16, "heads": 2}
SMALL = {"cnn": SMALL_CNN, "forecast": SMALL_FORECAST}  # a task's keys for a cheap build


def build(name: str, seed: int = 0, dtype: torch.dtype = torch.float32, ops=None, **overrides):
    """The task as run.py builds it: the model's seed, then instantiate(cfg.task, ops=, device=,
    dtype=, seed=) with an op in each slot its model calls."""
    cfg = OmegaConf.merge(OmegaConf.load(CONF / "task" / f"{name}.yaml").task, overrides)
    ops = {slot: (ops or {}).get(slot, SLOTS[slot].ours) for slot in TASKS[name].slots}
    torch.manual_seed(seed)
    return instantiate(cfg, ops=ops, device=torch.device("cpu"), dtype=dtype, seed=seed)


def test_the_registry_is_conf_task_each_yaml_builds_its_class():
    assert sorted(TASKS) == sorted(p.stem for p in (CONF / "task").glob("*.yaml"))
    for name, cls in TASKS.items():
        assert cls.name == name and set(cls.slots) <= set(SLOTS) and cls.card[0] >= 1


@pytest.mark.parametrize("name", TASKS)
def test_each_task_builds_from_its_yaml_and_answers_the_loop(name):
    task = build(name, **SMALL.get(name, {}))
    model = {"poly3": Poly3, "mlp": MLP, "cnn": CurveCNN}.get(name, torch.nn.Module)
    assert type(task) is TASKS[name] and task.name == name and isinstance(task.model, model)
    assert task.reduction == ("sum" if name == "poly3" else "mean")
    batch = task.batch(0)
    if task.residuals is None:  # a task with its own loss (forecast's cross-entropy)
        loss = task.loss(task.model, batch)
        assert loss.shape == () and loss.dtype == torch.float32 and loss.requires_grad
    else:
        residuals = task.residuals(task.model, batch)
        assert residuals.shape[0] == batch[1].shape[0] and residuals.dtype == torch.float32
    val = task.validate(task.model)
    assert val is None if name == "poly3" else (isinstance(val, float) and val > 0)
    summary = task.summary(task.model)
    expected = {"poly3": {"a", "b", "c", "d", "optimum_loss", "rel_gap"},
                "mlp": {"train_mse", "val_mse"},
                "cnn": {"val_mse", "rmse_a", "rmse_b", "rmse_c", "rmse_d"}}.get(name, set(summary))
    assert set(summary) == expected and all(math.isfinite(v) for v in summary.values())
    assert isinstance(task.figure(task.model, 7), Figure)
    assert task.model.training  # validation and figures leave the mode as they found it


def test_describe_says_what_is_fitted():
    poly3, mlp, cnn = build("poly3"), build("mlp"), build("cnn", **SMALL_CNN)
    assert poly3.describe(poly3.model) == "y = 0 + -1 * P3(0 + 0.3 x)"
    assert mlp.describe(mlp.model) == "MLP 1-64-64-1 fitting sin(x)"
    assert cnn.describe(cnn.model) == "CurveCNN with 2 conv-BN blocks, 67132 parameters"


def test_poly3_is_the_tutorials_data_and_start():
    task = build("poly3")
    x, y = task.batch(0)
    assert torch.equal(x, torch.linspace(-math.pi, math.pi, 2000))
    assert torch.equal(y, torch.sin(x))
    assert {k: p.item() for k, p in task.model.named_parameters()} == pytest.approx(TUTORIAL_START)


def test_each_task_runs_its_slots_ops_and_ignores_the_others():
    calls = []

    def p3(x):
        calls.append("legendre_p3")
        return legendre_p3_reference(x)

    def relu(x):
        calls.append("activation")
        return torch.relu(x)

    ops = {"legendre_p3": p3, "activation": relu, "linear": torch.nn.functional.linear,
           "conv_bn": None}
    for name in ("poly3", "mlp"):
        task = build(name, ops=ops)
        task.residuals(task.model, task.batch(0))
    assert calls == ["legendre_p3", "activation", "activation"]


@pytest.mark.parametrize(("name", "overrides"), [("mlp", {"noise": 0.1}), ("cnn", SMALL_CNN),
                                                  ("forecast", SMALL_FORECAST)])
def test_data_and_model_are_determined_by_the_seed(name, overrides):
    one, again, other = (build(name, seed=s, **overrides) for s in (1, 1, 2))
    for a, b in ((one, again), (one, other)):
        same = all(torch.equal(u, v) for u, v in zip(a.batch(3), b.batch(3), strict=True))
        same_model = all(torch.equal(u, v) for u, v in
                         zip(a.model.parameters(), b.model.parameters(), strict=True))
        assert same == same_model == (a is one and b is again)


def test_cnn_minibatch_of_a_step_is_the_same_in_any_order_of_calls():
    task = build("cnn", **SMALL_CNN)
    in_order = [task.batch(step)[1] for step in range(6)]
    resumed = build("cnn", **SMALL_CNN)
    assert torch.equal(resumed.batch(4)[1], in_order[4])  # a run resumed at step 4
    assert torch.equal(resumed.batch(2)[1], in_order[2])
    assert not torch.equal(in_order[0], in_order[1])


def test_cnn_targets_are_standardized_parameters_in_about_minus_one_to_one():
    task = build("cnn", n_train=512, n_val=16, batch_size=8)
    images, targets = task.train_set
    assert images.shape == (512, 1, 32, 32) and targets.shape == (512, 4)
    assert targets.abs().max() <= 1
    assert targets[:, 1].abs().min() >= 0.3  # |b| >= 0.3: one curve, one (a, b, c, d)


def test_data_are_made_in_float64_then_cast():
    single, double = build("mlp", noise=0.1), build("mlp", noise=0.1, dtype=torch.float64)
    assert torch.equal(single.batch(0)[1], double.batch(0)[1].float())


@pytest.mark.parametrize(("name", "key", "value", "message"), [
    ("poly3", "n_points", 1, "task.n_points must be >= 2, got 1"),
    ("poly3", "x_min", 4.0, "task.x_min must be finite and < task.x_max=3.141592653589793, got 4.0"),
    ("poly3", "x_max", math.inf, "task.x_min must be finite and < task.x_max=inf, got -3.141592653589793"),
    ("poly3", "init", {"d": math.nan}, "task.init.d must be finite, got nan"),
    ("mlp", "target", "sinh", "task.target must be one of sin, cos, tanh, abs, square, gauss, got 'sinh'"),
    ("mlp", "noise", -0.1, "task.noise must be >= 0 (the std of the target noise), got -0.1"),
    ("mlp", "n_val", 0, "task.n_val must be >= 1, got 0"),
    ("mlp", "hidden", [8, 0], "task.hidden must be a list of sizes >= 1, got [8, 0]"),
    ("cnn", "batch_size", 1, "task.batch_size must be in [2, task.n_train=64] (batch norm needs 2 images), got 1"),
    ("cnn", "image_size", 30, "task.image_size must be a positive multiple of 2**len(task.channels) = 4, got 30"),
    ("cnn", "channels", [], "task.channels must be a non-empty list of sizes >= 1, got []"),
    ("cnn", "n_val", 0, "task.n_val must be >= 1, got 0"),
    ("forecast", "width", 10, "task.width must be a positive multiple of 2 * task.heads = 4, got 10"),
    ("forecast", "limit", math.inf, "task.limit must be finite and > 0, got inf"),
])
def test_a_value_out_of_range_is_refused_naming_its_key(name, key, value, message):
    overrides = {**SMALL.get(name, {}), key: value}
    with pytest.raises(InstantiationException) as refused:
        build(name, **overrides)
    # Hydra wraps what the class raised; the cause is the one line a user needs.
    assert type(refused.value.__cause__) is ValueError
    assert str(refused.value.__cause__) == message


def test_the_closed_form_optimum_is_the_tutorials_and_scipys():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    x = torch.linspace(-math.pi, math.pi, 2000, dtype=torch.float64)
    best = poly3_optimum(x, torch.sin(x))
    assert best["loss"] == pytest.approx(TUTORIAL_OPTIMUM_LOSS, rel=1e-14)

    def model(x, a, b, c, d):
        return a + b * legendre_p3_reference(c + d * x)

    p, _ = scipy_optimize.curve_fit(model, x.numpy(), torch.sin(x).numpy(), p0=(0, -1, 0, 0.3),
                                    method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15)
    scipy_loss = float(((model(x, *p) - torch.sin(x)) ** 2).sum())
    assert best["loss"] <= scipy_loss * (1 + 1e-14)  # the closed form is the global minimum
    assert [best[k] for k in "abcd"] == pytest.approx(list(p), rel=1e-9, abs=1e-11)


def test_cubic_to_poly3_inverts_the_expansion_and_says_when_it_cannot():
    a, b, c, d = 0.3, -1.7, 0.2, 0.9
    cubic = (a + b * (2.5 * c**3 - 1.5 * c), b * d * (7.5 * c**2 - 1.5), 7.5 * b * c * d**2,
             2.5 * b * d**3)
    assert cubic_to_poly3(*cubic) == pytest.approx((a, b, c, d), rel=1e-12)
    assert cubic_to_poly3(0.0, 1.0, 0.0, 1.0) is None  # p2² <= 3·p1·p3
    x = torch.linspace(0, 1, 50, dtype=torch.float64)
    assert poly3_optimum(x, x**3 + x) is None
    task = build("poly3", x_min=0.0, x_max=1.0)
    task.data = (x.float(), (x**3 + x).float())
    assert "optimum_loss" not in task.summary(task.model)


def test_poly3_summary_at_the_optimum_has_no_gap():
    task = build("poly3", dtype=torch.float64)
    best = poly3_optimum(*task.data)
    with torch.no_grad():
        for name, p in task.model.named_parameters():
            p.fill_(best[name])
    summary = task.summary(task.model)
    assert summary["optimum_loss"] == pytest.approx(TUTORIAL_OPTIMUM_LOSS, rel=1e-14)
    assert abs(summary["rel_gap"]) < 1e-14


@pytest.mark.parametrize(("op", "named", "optimum"), [
    (None, "P3", True),  # ours
    (legendre_p3_reference, "P3", True),  # its twin
    (LegendrePolynomial3.apply, "LegendrePolynomial3", True),  # the tutorial's: P3's values
    (torch.sinh, "sinh", False),
    (functools.partial(torch.nn.functional.leaky_relu, negative_slope=0.1), "leaky_relu", False),
])
def test_poly3_names_its_op_and_compares_with_the_optimum_only_where_the_op_is_p3(
        op, named, optimum):
    task = build("poly3", ops=None if op is None else {"legendre_p3": op})
    assert task.describe(task.model) == f"y = 0 + -1 * {named}(0 + 0.3 x)"
    summary = task.summary(task.model)
    assert ("optimum_loss" in summary) == ("rel_gap" in summary) == optimum


def test_a_user_op_in_poly3_closes_with_its_own_formula_and_no_optimum(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    go(tmp_path / "run", "ops.legendre_p3=torch:sinh", "steps=5")
    said = [r.getMessage() for r in caplog.records if r.name == "fitting.run"]
    assert any(re.fullmatch(r"Result: y = \S+ \+ \S+ \* sinh\(\S+ \+ \S+ x\)", s) for s in said)
    assert not any("optimum" in s for s in said)
