"""The fitting tasks (poly3, mlp, cnn): data, model, residuals, validation and figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

if TYPE_CHECKING:
    from fitting.track.figures import FigureSpec


class Task(Protocol):
    """What the training loop needs from a task.

    `residuals(model, batch)` is also a plain function in each task's module, so optimizers that
    work on residuals (Levenberg–Marquardt) can use it; the loss is `reduction` of residuals².
    """

    name: str
    reduction: str  # "sum" or "mean"
    model: nn.Module
    has_validation: bool
    full_batch: bool  # batch(step) is the whole training set every step

    def batch(self, step: int) -> Any:
        """The training batch of iteration `step` (0-based)."""

    def residuals(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """Prediction minus target on `batch`."""

    def validate(self, model: nn.Module) -> float:
        """The validation loss (same reduction as training), in eval mode and without grad."""

    def figure(self, model: nn.Module, step: int) -> FigureSpec:
        """The figure of the fit (target vs prediction) as data, drawn by fitting.track.figures."""

    def summary(self, model: nn.Module) -> dict[str, float]:
        """Final parameters/metrics, printed at the end and logged with the hparams."""

    def describe(self, model: nn.Module) -> str:
        """The fitted model in one line (poly3: its formula)."""


def squared_error(residuals: torch.Tensor, reduction: str) -> torch.Tensor:
    """Sum or mean of the squared residuals (the tutorial's `(y_pred - y).pow(2).sum()`)."""
    sq = residuals.pow(2)
    return sq.sum() if reduction == "sum" else sq.mean()


def build_task(
    cfg_task: Any, impl: str, device: torch.device, dtype: torch.dtype, seed: int
) -> Task:
    """The task `cfg_task.name` with its data made from `seed` and its model built with `impl`."""
    generator = torch.Generator().manual_seed(seed)
    if cfg_task.name == "poly3":
        from fitting.tasks.poly3 import Poly3Task

        return Poly3Task(cfg_task, impl, device, dtype)
    if cfg_task.name == "mlp":
        from fitting.tasks.mlp import MLPTask

        return MLPTask(cfg_task, impl, device, dtype, generator)
    if cfg_task.name == "cnn":
        from fitting.tasks.cnn import CNNTask

        return CNNTask(cfg_task, impl, device, dtype, generator)
    raise ValueError(f"unknown task {cfg_task.name!r}; choose poly3, mlp or cnn")
