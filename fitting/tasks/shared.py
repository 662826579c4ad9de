"""What the tasks share: a batch of (inputs, targets), their base class, range checks and the
figure of a 1-D fit."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Batch = tuple[Tensor, Tensor]


def require(checks: Iterable[tuple[str, Any, bool, str]], group: str = "task") -> None:
    """ValueError naming the first (key, value, ok, allowed range) that is not ok (`group.key`)."""
    for key, value, ok, allowed in checks:
        if not ok:
            raise ValueError(f"{group}.{key} must be {allowed}, got {value!r}")


def range_checks(n_points: int, x_min: float, x_max: float, least: int) -> list[tuple]:
    """The checks of a grid of n_points on [x_min, x_max]."""
    finite = math.isfinite(x_min) and math.isfinite(x_max)
    return [("n_points", n_points, n_points >= least, f">= {least}"),
            ("x_min", x_min, finite and x_min < x_max, f"finite and < task.x_max={x_max!r}")]


class Task:
    """What every task has: residuals on a batch; its whole data set as each step's batch. Each
    declares `name` (task=<name>), the op `slots` its model calls, `card` (SGD steps, overrides)."""

    def batch(self, step: int) -> Batch:
        """The whole data set, every step."""
        return self.data

    @staticmethod
    def residuals(model: Callable[[Tensor], Tensor], batch: Batch) -> Tensor:
        """Prediction minus target on a batch (inputs, targets)."""
        inputs, targets = batch
        return model(inputs) - targets


def line_figure(model: Callable[[Tensor], Tensor], batch: Batch, title: str, target_label: str,
                points: Batch | None = None) -> Figure:
    """A 1-D fit: the target curve of `batch`, the model's prediction there and, if given, the
    training points."""
    from matplotlib.figure import Figure

    with torch.no_grad():
        x, target, pred = (t.reshape(-1).cpu().numpy() for t in (*batch, model(batch[0])))
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    if points is not None:
        ax.scatter(*(t.reshape(-1).cpu().numpy() for t in points), s=6, color="0.6",
                   label="training points")
    ax.plot(x, target, linewidth=2.5, color="0.7", label=target_label)
    ax.plot(x, pred, color="C0", label="prediction")
    ax.set(xlabel="x", ylabel="y", title=title)
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    return fig
