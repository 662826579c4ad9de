"""Each optimizer is one option in OPTIMIZERS, found by name: its YAML option, schema, builder and
start-up line; an optimizer with special needs meets them inside its own step()."""

from __future__ import annotations

import pytest
import torch

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.optim import OPTIMIZERS
from fitting.optim.gradient_descent import GradientDescent
from fitting.optim.levenberg_marquardt import LevenbergMarquardt
from fitting.optim.newton import Newton
from fitting.optim.option import StopConfig
from fitting.tasks import TASKS, build_task
from fitting.track.tb_logging import grad_norm
from fitting.train.loop import Closure
from tests.helpers.app_config import CONF, make_cfg

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

BUILT = {
    "gd": GradientDescent,
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
    "lbfgs": torch.optim.LBFGS,
    "newton": Newton,
    "lm": LevenbergMarquardt,
}


def poly3(cfg):
    """The poly3 task of `cfg` on the CPU in float64, its op as `cfg.ops` chooses it."""
    ops = {slot: cfg.ops[slot] for slot in TASKS["poly3"].slots}
    return build_task(cfg.task, ops, torch.device("cpu"), torch.float64, cfg.seed)


def test_one_option_per_yaml_option():
    assert sorted(OPTIMIZERS) == sorted(p.stem for p in (CONF / "optimizer").glob("*.yaml"))
    assert sorted(OPTIMIZERS) == sorted(BUILT)
    for name, option in OPTIMIZERS.items():
        defaults = option.schema()
        assert option.name == defaults.name == name
        # Every schema has lr: set by default where it is taken, else null (and refused).
        assert (defaults.lr is not None) == option.takes_lr, name
        assert isinstance(defaults.stop, StopConfig)
    assert [n for n, o in OPTIMIZERS.items() if not o.takes_lr] == ["lbfgs", "newton", "lm"]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_the_option_builds_its_optimizer(name):
    cfg = make_cfg(f"optimizer={name}")
    task = poly3(cfg)
    optimizer = OPTIMIZERS[name].build(cfg.optimizer, task.model, task)
    assert type(optimizer) is BUILT[name]
    assert optimizer.param_groups[0]["params"] == list(task.model.parameters())


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ((), "gd lr=5e-06"),
        (("optimizer=sgd",), "sgd lr=5e-06"),
        (("optimizer=adam",), "adam lr=0.003"),
        (("optimizer=lbfgs",), "lbfgs (strong-Wolfe line search, max_eval=25)"),
        (("optimizer=newton",), "newton damping=0 max_params=1000"),
        (("optimizer=lm",), "lm damping=0.001 max_params=1000"),
    ],
)
def test_describe(overrides, line):
    cfg = make_cfg(*overrides)
    assert OPTIMIZERS[cfg.optimizer.name].describe(cfg.optimizer) == line


def test_lbfgs_step_counts_evaluations_and_the_starting_gradient_norm():
    """The line search evaluates trial points, whose gradients it leaves in .grad; the loop's
    closure still reports the gradient norm at the step's starting point (optim/grad_norm)."""
    cfg = make_cfg("optimizer=lbfgs")
    task = poly3(cfg)
    params = list(task.model.parameters())
    optimizer = OPTIMIZERS["lbfgs"].build(cfg.optimizer, task.model, task)
    batch = task.batch(0)
    Closure(task, task.model, batch, optimizer)()
    start = grad_norm(params)

    closure = Closure(task, task.model, batch, optimizer)
    optimizer.step(closure)
    assert closure.evals > 1  # the line search evaluated a trial point
    assert grad_norm(params) != start  # .grad holds a trial point's gradient
    assert closure.grad_norm == start


@pytest.mark.parametrize("name", ["newton", "lm"])
def test_second_order_optimizers_take_the_task_batch_and_report_their_damping(name):
    cfg = make_cfg(f"optimizer={name}")
    task = poly3(cfg)

    def loss() -> float:
        return float(task.residuals(task.model, task.batch(0)).detach().square().sum())

    optimizer = OPTIMIZERS[name].build(cfg.optimizer, task.model, task)
    before = loss()
    # Built on the task's full batch: a step needs nothing more.
    returned = optimizer.step()
    assert float(returned) == pytest.approx(before)
    # The loop logs these as optim/damping and optim/rel_step.
    assert {"damping", "rel_step"} <= optimizer.last_stats.keys()
    assert optimizer.last_stats["damping"] >= 0
    assert optimizer.last_stats["rel_step"] > 0
    assert loss() < before


@pytest.mark.parametrize("name", ["gd", "sgd", "adam", "lbfgs"])
def test_first_order_optimizers_log_no_numbers_of_their_own(name):
    cfg = make_cfg(f"optimizer={name}")
    task = poly3(cfg)
    optimizer = OPTIMIZERS[name].build(cfg.optimizer, task.model, task)
    assert getattr(optimizer, "last_stats", {}) == {}
