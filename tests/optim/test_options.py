"""Each optimizer is one spec in OPTIMIZERS, found by name: its YAML option, schema, builder and
the hooks the loop calls around a step."""

from __future__ import annotations

import pytest
import torch

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.optim import OPTIMIZERS
from fitting.optim.gradient_descent import GradientDescent
from fitting.optim.levenberg_marquardt import LevenbergMarquardt
from fitting.optim.newton import Newton
from fitting.optim.spec import StepStats, StopConfig
from fitting.tasks import build_task
from fitting.train.closure import make_closure
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
    """The poly3 task of `cfg` on the CPU in float64."""
    return build_task(cfg.task, cfg.impl.value, torch.device("cpu"), torch.float64, cfg.seed)


def test_one_spec_per_yaml_option():
    assert sorted(OPTIMIZERS) == sorted(p.stem for p in (CONF / "optimizer").glob("*.yaml"))
    assert sorted(OPTIMIZERS) == sorted(BUILT)
    for name, spec in OPTIMIZERS.items():
        defaults = spec.schema()
        assert spec.name == defaults.name == name
        # Every schema has lr: set by default where it is taken, else null (and refused).
        assert (defaults.lr is not None) == spec.takes_lr, name
        assert isinstance(defaults.stop, StopConfig)
    assert [n for n, s in OPTIMIZERS.items() if not s.takes_lr] == ["lbfgs", "newton", "lm"]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_the_spec_builds_its_optimizer(name):
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


def test_lbfgs_hooks_restore_the_starting_gradients_and_count_evaluations():
    spec = OPTIMIZERS["lbfgs"]
    cfg = make_cfg("optimizer=lbfgs")
    task = poly3(cfg)
    params = list(task.model.parameters())
    optimizer = spec.build(cfg.optimizer, task.model, task)
    batch = task.batch(0)
    make_closure(task, optimizer, batch, StepStats(), params=params)()
    start = [p.grad.clone() for p in params]

    stats = StepStats()
    optimizer.step(make_closure(task, optimizer, batch, stats, params=params))
    assert stats.evals > 1  # the line search evaluated a trial point: its gradients are in .grad
    assert not all(torch.equal(p.grad, g) for p, g in zip(params, start, strict=True))
    spec.after_step(optimizer, stats)
    assert all(torch.equal(p.grad, g) for p, g in zip(params, start, strict=True))
    assert spec.extra_scalars(optimizer, stats) == {"optim/evals": stats.evals}


@pytest.mark.parametrize("name", ["newton", "lm"])
def test_second_order_hooks_give_the_batch_and_report_damping(name):
    spec = OPTIMIZERS[name]
    cfg = make_cfg(f"optimizer={name}")
    task = poly3(cfg)
    optimizer = spec.build(cfg.optimizer, task.model, task)
    with pytest.raises(RuntimeError, match=f"optimizer={name}: no batch yet"):
        optimizer.step()
    spec.prepare_batch(optimizer, task, task.batch(0))
    optimizer.step()
    scalars = spec.extra_scalars(optimizer, StepStats(evals=1))
    assert set(scalars) == {"optim/damping", "optim/rel_step"}
    assert scalars["optim/damping"] == optimizer.last_stats["damping"]
    assert scalars["optim/rel_step"] > 0


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_first_order_optimizers_have_no_hooks(name):
    spec = OPTIMIZERS[name]
    assert spec.extra_scalars(None, StepStats()) == {}
    assert spec.prepare_batch(None, None, None) is None
    assert spec.after_step(None, StepStats()) is None
