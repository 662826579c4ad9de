"""The training loop and its closure: a non-finite loss or gradient stops the step before its
update, the bytes saved for backward are counted on the steps that log them only (a run reports
the same count whatever its log interval), and the console's step lines."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.optim import OPTIMIZERS
from fitting.tasks import build_task, squared_error
from fitting.train.loop import Closure
from fitting.train.run import run
from fitting.train.signals import NonFiniteStep
from models.ops import saved_tensor_bytes
from tests.helpers.app_config import make_cfg

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

QUIET = ["log.figure_every=0", "log.hist_every=0"]


def poly3_parts():
    """The default poly3 task (CPU, float64) and its gd optimizer."""
    cfg = make_cfg()
    task = build_task(cfg.task, {"legendre_p3": "custom"}, torch.device("cpu"), torch.float64,
                      cfg.seed)
    return task, OPTIMIZERS["gd"].build(cfg.optimizer, task.model, task)


def forward_saved_bytes(task) -> int:
    """The bytes poly3's loss saves for backward, counted around the forward directly."""
    with saved_tensor_bytes() as counter:
        squared_error(task.residuals(task.model, task.batch(0)), task.reduction)
    return counter.bytes


def scalars(run_dir, tag: str) -> dict[int, float]:
    """step -> value of `tag` in the TensorBoard run in `run_dir`."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


class GivenStep:
    """A task whose loss and gradients are the given numbers: its residual squares to `loss`
    and each parameter's gradient is replaced by its entry of `grads` (float32)."""

    reduction = "sum"

    def __init__(self, loss: float, grads: list) -> None:
        values = [torch.tensor(g) for g in grads]
        self.model = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.ones_like(v)) for v in values])
        self.loss, self.grads = loss, values

    def residuals(self, forward, batch) -> torch.Tensor:
        total = torch.tensor(self.loss).sqrt()
        for p, g in zip(self.model, self.grads, strict=True):
            p.register_hook(lambda _, g=g: g.clone())
            total = total + (p * 0).sum()
        return total


@pytest.mark.parametrize(
    ("loss", "grads", "what"),
    [
        (math.nan, [0.0, 1.0], "loss"),
        (math.inf, [0.0, 1.0], "loss"),
        (1.0, [0.0, math.nan], "gradient"),
        (1.0, [math.inf, -math.inf], "gradient"),
        (1.0, [[1.0, 2.0], [3.0, math.inf]], "gradient"),
        (1.0, [[3e38, 3e38]], None),  # finite entries, though their norm overflows float32
        (1.0, [0.0, 1.0], None),
        (1.0, [[1.0, 2.0], [3.0, 4.0]], None),
    ],
)
def test_a_non_finite_loss_or_gradient_stops_before_the_update(loss, grads, what):
    task = GivenStep(loss, grads)
    optimizer = torch.optim.SGD(task.model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in task.model]
    closure = Closure(task, task.model, None, optimizer)
    if what is None:
        optimizer.step(closure)
        assert not all(torch.equal(b, p) for b, p in zip(before, task.model, strict=True))
        norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in task.grads))
        assert closure.grad_norm == pytest.approx(norm if norm < 3.4e38 else math.inf)
        return
    with pytest.raises(NonFiniteStep) as info:
        optimizer.step(closure)
    assert info.value.what == what
    assert str(info.value) == f"non-finite {what}"
    for b, p in zip(before, task.model, strict=True):
        assert torch.equal(b, p)  # not updated


@pytest.mark.parametrize("logged", [True, False])
def test_only_a_logged_step_runs_the_counting_hook(logged):
    task, optimizer = poly3_parts()
    packed = []

    def outer_pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t)
        return t

    closure = Closure(task, task.model, task.batch(0), optimizer, count_saved=logged)
    # The innermost saved-tensors hook takes every tensor: an outer one sees them only when
    # the closure installed none.
    with torch.autograd.graph.saved_tensors_hooks(outer_pack, lambda t: t):
        loss = closure()
    assert torch.isfinite(loss) and closure.evals == 1
    assert all(p.grad is not None for p in task.model.parameters())
    if logged:
        assert packed == []
        assert closure.saved_bytes == forward_saved_bytes(task) > 0
    else:
        assert len(packed) > 0
        assert closure.saved_bytes == 0


def test_a_run_reports_the_count_of_its_logged_steps(tmp_path, caplog):
    task, _ = poly3_parts()
    expected = forward_saved_bytes(task) // 2  # the app runs poly3 in float32
    with caplog.at_level(logging.INFO, logger="fitting.train.run"):
        run(make_cfg("steps=9", "log.every=4", "dtype=float32", "device=cpu"), tmp_path)
    logged = scalars(tmp_path, "memory/saved_bytes")
    assert sorted(logged) == [0, 4, 8]  # every 4th step and the last
    assert set(logged.values()) == {expected}
    assert any(f"{expected} bytes saved for backward per step" in r.getMessage()
               for r in caplog.records)


def test_a_step_of_several_evaluations_counts_its_first(tmp_path):
    """lbfgs evaluates the closure several times a step: the saved bytes are one forward's,
    optim/evals says how many there were."""
    task, _ = poly3_parts()
    expected = forward_saved_bytes(task) // 2
    run(make_cfg("optimizer=lbfgs", "optimizer.stop.patience=0", "steps=3", "log.every=1",
                 "dtype=float32", "device=cpu", *QUIET), tmp_path)
    assert set(scalars(tmp_path, "memory/saved_bytes").values()) == {expected}
    assert max(scalars(tmp_path, "optim/evals").values()) > 1


def test_console_lines_name_the_step_and_how_many_are_done(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="fitting.train.loop"):
        run(make_cfg("steps=6", "log.console_every=3", "log.every=1", *QUIET), tmp_path)
    lines = [r.getMessage() for r in caplog.records if r.name == "fitting.train.loop"]
    loss = scalars(tmp_path, "loss/train")
    assert lines == [f"step 2  loss {loss[2]:.6g}  (3/6 steps done)",
                     f"step 5  loss {loss[5]:.6g}  (6/6 steps done)"]
