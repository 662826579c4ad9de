"""The loop's closure: the bytes saved for backward are counted on the steps that log them only,
and a run reports the same count whatever its log interval."""

from __future__ import annotations

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.optim import OPTIMIZERS
from fitting.optim.spec import StepStats
from fitting.tasks import build_task, squared_error
from fitting.train.closure import make_closure
from fitting.train.run import run
from models.ops import saved_tensor_bytes
from tests.helpers.app_config import make_cfg

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py



def poly3_parts():
    """The default poly3 task (CPU, float64) and its gd optimizer."""
    cfg = make_cfg()
    task = build_task(cfg.task, "custom", torch.device("cpu"), torch.float64, cfg.seed)
    return task, OPTIMIZERS["gd"].build(cfg.optimizer, task.model, task)


def forward_saved_bytes(task) -> int:
    """The bytes poly3's loss saves for backward, counted around the forward directly."""
    with saved_tensor_bytes() as counter:
        squared_error(task.residuals(task.model, task.batch(0)), task.reduction)
    return counter.bytes


@pytest.mark.parametrize("logged", [True, False])
def test_only_a_logged_step_runs_the_counting_hook(logged):
    task, optimizer = poly3_parts()
    packed = []

    def outer_pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t)
        return t

    stats = StepStats(logged=logged)
    closure = make_closure(task, optimizer, task.batch(0), stats)
    # The innermost saved-tensors hook takes every tensor: an outer one sees them only when
    # the closure installed none.
    with torch.autograd.graph.saved_tensors_hooks(outer_pack, lambda t: t):
        loss = closure()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in task.model.parameters())
    if logged:
        assert packed == []
        assert stats.saved_bytes == forward_saved_bytes(task) > 0
    else:
        assert len(packed) > 0
        assert stats.saved_bytes == 0


def test_a_run_reports_the_count_of_its_logged_steps(tmp_path):
    task, _ = poly3_parts()
    expected = forward_saved_bytes(task) // 2  # the app runs poly3 in float32
    run(make_cfg("steps=9", "log.every=4", "dtype=float32", "device=cpu"), tmp_path)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    logged = {e.step: e.value for e in acc.Scalars("memory/saved_bytes")}
    assert sorted(logged) == [0, 4, 8]  # every 4th step and the last
    assert set(logged.values()) == {expected}
    assert [e.value for e in acc.Scalars("final/saved_bytes")] == [expected]
