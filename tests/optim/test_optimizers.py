"""GD, Newton and LM (and torch's LBFGS as configured) on the tutorial's poly3, built from conf/,
stepped through a stand-in of the loop's Closure."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from fitting.optim import GD
from fitting.slots import SLOTS, USES
from fitting.tasks import TASKS, Poly3Task
from fitting.tasks.optimum import TUTORIAL_OPTIMUM_LOSS
from models.ops import legendre_p3, legendre_p3_reference
from tests.helpers.app_config import CONVERGING
from tests.optim.tutorial import LegendrePolynomial3, tutorial

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CONF = Path(__file__).resolve().parents[2] / "conf"


class Closure:
    """The loop's Closure, as its contract says: zero grads, forward, loss, backward; the loss of
    residuals (reduce); and the residuals, at the model's parameters or at {name: tensor} by
    torch.func.functional_call."""

    def __init__(self, task, optimizer, batch):
        self.task, self.optimizer, self.batch, self.reduction = task, optimizer, batch, task.reduction

    def __call__(self) -> torch.Tensor:
        self.optimizer.zero_grad()
        if self.task.residuals is None:  # a task with its own loss (forecast's cross-entropy)
            loss = self.task.loss(self.task.model, self.batch)
        else:
            loss = self.reduce(self.residuals())
        loss.backward()
        return loss

    def reduce(self, r: torch.Tensor) -> torch.Tensor:
        return r.square().sum() if self.reduction == "sum" else r.square().mean()

    def residuals(self, params=None) -> torch.Tensor:
        model = self.task.model
        if params is None:
            return self.task.residuals(model, self.batch)
        return self.task.residuals(lambda x: torch.func.functional_call(model, params, (x,)),
                                   self.batch)


def optimizer_cfg(name: str, task: str = "poly3"):
    """conf/optimizer/<name>.yaml with conf/task_optimizer/<task>_<name>.yaml over it."""
    cfg = OmegaConf.load(CONF / "optimizer" / f"{name}.yaml")
    cfg = cfg.optimizer if "optimizer" in cfg else cfg
    pair = CONF / "task_optimizer" / f"{task}_{name}.yaml"
    return OmegaConf.merge(cfg, OmegaConf.load(pair).optimizer) if pair.exists() else cfg


def poly3(dtype=torch.float32, p3=None, init=None) -> Poly3Task:
    cfg = OmegaConf.load(CONF / "task" / "poly3.yaml").task
    cfg.init = init or cfg.init
    ops = {"legendre_p3": SLOTS["legendre_p3"].ours if p3 is None else p3}
    return instantiate(cfg, ops=ops, device="cpu", dtype=dtype, seed=0)


def fit(name: str, steps: int, dtype=torch.float32, p3=None, **overrides):
    """The task, the optimizer and the loss each step returned, after `steps` steps."""
    task = poly3(dtype, p3)
    optimizer = instantiate(OmegaConf.merge(optimizer_cfg(name), overrides))(
        task.model.named_parameters())
    losses = [optimizer.step(Closure(task, optimizer, task.batch(step))).item()
              for step in range(steps)]
    return task, optimizer, losses


def test_gd_is_the_tutorials_loop_bit_for_bit():
    task, _, losses = fit("gd", 300, p3=LegendrePolynomial3.apply)
    got = {"loss": losses[-1], **{n: p.item() for n, p in task.model.named_parameters()}}
    expected = tutorial(300)
    assert got == expected
    assert expected["a"] != 0.0 and expected["c"] != 0.0  # the case that tells roundings apart


TUTORIAL_OP = pytest.param(LegendrePolynomial3.apply, id="tutorial-LegendrePolynomial3")


@cache
def converged(name: str, p3) -> tuple[float, dict[str, float]]:
    steps = {"newton": 12, "lm": 16, "lbfgs": 40}[name]
    task, optimizer, losses = fit(name, steps, torch.float64, p3)
    with torch.no_grad():
        final = task.residuals(task.model, task.batch(0)).square().sum().item()
    return final, getattr(optimizer, "last_stats", {})


@pytest.mark.parametrize("p3", [legendre_p3, legendre_p3_reference, TUTORIAL_OP])
@pytest.mark.parametrize("name", CONVERGING)
def test_second_order_and_lbfgs_reach_the_exact_optimum_in_float64(name, p3):
    final, stats = converged(name, p3)
    assert final == pytest.approx(TUTORIAL_OPTIMUM_LOSS, rel=1e-12)
    if name != "lbfgs":
        assert stats["accepted"] == 1.0 and stats["grad_norm"] < 1e-6


@pytest.mark.parametrize(("name", "init", "steps"), [
    ("lm", {"a": 0.0, "b": -1.0, "c": 0.0, "d": 3.0}, 20),  # d ten times the tutorial's
    ("newton", {"a": 0.0, "b": -1.0, "c": 0.0, "d": 0.1}, 16),  # its Hessian is not PD there
])
def test_from_a_far_start_the_damping_rises_on_a_rejected_step_and_still_reaches_the_optimum(
        name, init, steps):
    # A damping that shrank on rejection instead ends at 1912 (lm) or 559 (newton), "converged".
    task = poly3(torch.float64, init=init)
    optimizer = instantiate(optimizer_cfg(name))(task.model.named_parameters())
    tries = []
    for step in range(steps):
        optimizer.step(Closure(task, optimizer, task.batch(step)))
        tries.append(optimizer.last_stats["tries"])
    assert max(tries) > 1  # the rejection branch ran
    with torch.no_grad():
        final = task.residuals(task.model, task.batch(0)).square().sum().item()
    assert final == pytest.approx(TUTORIAL_OPTIMUM_LOSS, rel=1e-12)


def test_newton_keeps_its_damping_in_the_state_dict():
    _, optimizer, _ = fit("newton", 2, torch.float64, damping=1.0)
    state = optimizer.state_dict()
    assert state["state"][0]["damping"] == 0.01  # two accepted steps, each /factor
    fresh = instantiate(optimizer_cfg("newton"))(poly3(torch.float64).model.named_parameters())
    fresh.load_state_dict(state)
    assert fresh.damping == 0.01


def test_newton_and_lm_say_what_the_pre_check_must_check():
    assert (USES["newton"], USES["lm"]) == (("second_order",), ("forward_ad",))


@pytest.mark.parametrize("name", list(USES))  # the n×n ones
def test_too_many_parameters_are_refused_before_anything_n_by_n(name):
    params = [torch.zeros(1001, requires_grad=True)]
    with pytest.raises(ValueError, match=rf"^optimizer={name} needs an n×n matrix but the model "
                       r"has 1001 parameters, more than optimizer.max_params=1000; use "):
        instantiate(optimizer_cfg(name))(params)


@pytest.mark.parametrize(("name", "key", "value", "message"), [
    ("gd", "lr", 0.0, "optimizer.lr must be > 0, got 0.0"),
    ("newton", "factor", 1.0, "optimizer.factor must be > 1, got 1.0"),
    ("newton", "damping", -1.0, "optimizer.damping must be >= 0, got -1.0"),
    ("newton", "max_tries", 0, "optimizer.max_tries must be >= 1, got 0"),
    ("lm", "damping", 0.0, "optimizer.damping must be > 0, got 0.0"),
    ("lm", "scaling", "none", "optimizer.scaling must be marquardt or levenberg, got 'none'"),
    ("lm", "ftol", -1.0, "optimizer.ftol must be >= 0 or null, got -1.0"),
])
def test_a_value_out_of_range_is_refused_naming_its_key(name, key, value, message):
    build = instantiate(OmegaConf.merge(optimizer_cfg(name), {key: value}))
    with pytest.raises(ValueError) as refused:
        build(poly3().model.named_parameters())
    assert str(refused.value) == message


def test_lm_asks_for_named_parameters():
    with pytest.raises(ValueError, match=r"LM\(model.named_parameters\(\)\)"):
        instantiate(optimizer_cfg("lm"))(poly3().model.parameters())


def test_gd_takes_plain_parameters_too():
    assert isinstance(GD(poly3().model.parameters(), lr=0.1), torch.optim.Optimizer)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "optimizer").glob("*.yaml")))
def test_every_task_and_optimizer_pair_has_all_its_values(task, name):
    # An lr lives in conf/task_optimizer/<task>_<optimizer>.yaml only; every pair has one.
    assert OmegaConf.missing_keys(optimizer_cfg(name, task)) == set()
