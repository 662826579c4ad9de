"""The closure each optimizer step evaluates: loss, backward, and what the loop records of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fitting.optim.spec import StepStats
from fitting.tasks import Task, squared_error
from fitting.train.signals import check_finite
from models.ops import saved_tensor_bytes


def make_closure(
    task: Task,
    optimizer: torch.optim.Optimizer,
    batch: Any,
    stats: StepStats,
    forward: Callable[..., Any] | None = None,
    params: list[torch.Tensor] | None = None,
    check: bool = False,
) -> Callable[[], torch.Tensor]:
    """The standard closure (zero grads, forward, loss, backward, return the loss), which also
    records in `stats` its evaluations, the bytes the forward saved for backward and the
    gradients of its first evaluation (of `params`).

    `check`: the first evaluation raises NonFiniteStep if the loss or a gradient of `params` is
    not finite (and stores ‖∇loss‖ in `stats` if it `want_norm`). Every optimizer evaluates the
    closure before changing any parameter, so that step's update is never applied."""
    forward = task.model if forward is None else forward

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        with saved_tensor_bytes() as counter:
            loss = squared_error(task.residuals(forward, batch), task.reduction)
        loss.backward()
        stats.evals += 1
        stats.saved_bytes = counter.bytes
        if stats.evals == 1 and params is not None:
            # zero_grad() sets .grad to None, so later evaluations make new tensors: keeping
            # references is enough.
            stats.first_grads = [p.grad for p in params]
            if check:
                stats.grad_norm = check_finite(loss, params, stats.want_norm)
        return loss

    return closure
