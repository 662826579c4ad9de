"""Each task is one option in TASKS, found by name: its YAML option, schema, checks, op slots
and builder."""

from __future__ import annotations

import pytest
import torch

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.checks import Checker
from fitting.tasks import TASKS, build_task
from tests.helpers.app_config import CONF, make_cfg

SMALL = {
    "poly3": ["task.n_points=20"],
    "mlp": ["task=mlp", "task.n_points=16", "task.n_val=8", "task.hidden=[4]"],
    "cnn": ["task=cnn", "task.n_train=8", "task.n_val=4", "task.batch_size=4",
            "task.image_size=16"],
}


def problems(cfg) -> list[str]:
    """What the task's option finds wrong with `cfg.task`."""
    checker = Checker()
    TASKS[cfg.task.name].check(cfg.task, checker.under("task"))
    return checker.problems


def test_one_option_per_yaml_option():
    assert sorted(TASKS) == sorted(p.stem for p in (CONF / "task").glob("*.yaml"))
    for name, option in TASKS.items():
        assert option.name == option.schema().name == name


@pytest.mark.parametrize("name", list(TASKS))
def test_the_option_builds_its_task(name):
    cfg = make_cfg(*SMALL[name])
    assert problems(cfg) == []
    ops = dict.fromkeys(TASKS[name].slots, "builtin")
    task = build_task(cfg.task, ops, torch.device("cpu"), torch.float64, 0)
    assert task.name == name and task.reduction in ("sum", "mean")
    batch = task.batch(0)
    loss = task.residuals(task.model, batch).pow(2).sum()
    assert torch.isfinite(loss) and loss.dtype == torch.float64


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["task.n_points=1", "task.x_max=-4"], [
            "task.n_points must be >= 2, got 1",
            "task.x_min and task.x_max must be finite with task.x_min < task.x_max, "
            "got x_min=-3.141592653589793, x_max=-4.0",
        ]),
        (["task.init.d=inf"], ["task.init.d must be finite, got inf"]),
        (["task=mlp", "task.x_min=nan", "task.hidden=[0]"], [
            "task.x_min and task.x_max must be finite with task.x_min < task.x_max, "
            "got x_min=nan, x_max=3.141592653589793",
            "task.hidden sizes must be >= 1, got [0]",
        ]),
        (["task=cnn", "task.n_train=4", "task.batch_size=5", "task.channels=[8,0]"], [
            "task.batch_size must be in [2, task.n_train=4] (batch norm needs 2 images), got 5",
            "task.channels must be a non-empty list of sizes >= 1, got [8, 0]",
        ]),
        (["task=cnn", "task.channels=[8,8,8]", "task.image_size=20"], [
            "task.image_size must be a positive multiple of 2**len(task.channels) = 8 (one 2x2 "
            "pooling per block), got 20",
        ]),
    ],
)
def test_checks_name_every_problem_with_its_full_key(overrides, expected):
    assert problems(make_cfg(*overrides)) == expected
