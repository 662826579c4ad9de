"""What a task option is (TaskOption: schema, checks, builder) and what the training loop needs
from the task it builds (Task). No torch here: validate.py runs the checks before torch loads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fitting.checks import Checker

if TYPE_CHECKING:
    import torch
    from torch import nn

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


# build(cfg_task, ops, device, dtype, generator): the task, its model running the functions
# `ops` maps its slots to, its data drawn from `generator`.
TaskBuilder = Callable[[Any, dict, "torch.device", "torch.dtype", "torch.Generator"], Task]


@dataclass(frozen=True)
class TaskOption:
    """task=<name>: `schema` is its config dataclass (its defaults are the task's),
    `check(cfg, checker)` adds its out-of-range values, `build` makes the Task; `slots` are the
    op slots its model runs (the `ops.<slot>=` keys that apply to it)."""

    name: str
    schema: type
    check: Callable[[Any, Checker], None]
    build: TaskBuilder
    slots: tuple[str, ...] = ()
