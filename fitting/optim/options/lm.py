"""optimizer=lm: Levenberg–Marquardt on the residuals, the Jacobian by forward-mode AD through
the model's ops (fitting.optim.levenberg_marquardt)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.optim.option import MAX_PARAMS, OptimizerOption, StopConfig
from fitting.optim.options import damped

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fitting.tasks import Task


class LMScaling(Enum):
    marquardt = "marquardt"
    levenberg = "levenberg"


@dataclass
class LMConfig:
    name: str = "lm"
    lr: float | None = None  # refused: damping, not a learning rate, sets the step
    damping: float = 1e-3  # initial μ
    scaling: LMScaling = LMScaling.marquardt
    max_tries: int = 10
    max_params: int = MAX_PARAMS  # JᵀJ is n×n and each try solves it
    max_jacobian_numel: int = 50_000_000
    chunk_size: int = 64  # Jacobian columns per forward-mode pass
    ftol: float | None = None  # a change of Σr² within ftol·Σr² is accepted as no change
    # Stops by default once converged: a task's 2000-step budget is not 2000 steps of rounding.
    stop: StopConfig = field(default_factory=lambda: StopConfig(patience=3))


def check(cfg: Any, c: Checker) -> None:
    """damping > 0, a Jacobian limit >= 1, and the keys shared with newton."""
    damped.check(cfg, c)
    c.positive("damping", cfg.damping)
    c.at_least("max_jacobian_numel", cfg.max_jacobian_numel, 1)


def build(cfg: Any, model: nn.Module, task: Task) -> torch.optim.Optimizer:
    """LevenbergMarquardt on the task's residuals; ConfigError for a model it cannot take, and
    for a full-batch task whose Jacobian exceeds max_jacobian_numel (before any step)."""
    import torch

    from fitting.optim.levenberg_marquardt import LevenbergMarquardt

    optimizer = LevenbergMarquardt(
        model.parameters(),
        damped.task_residuals("lm", model, task, cfg.max_params),
        reduction=task.reduction,
        damping=cfg.damping,
        scaling=cfg.scaling.value,
        max_tries=cfg.max_tries,
        chunk_size=cfg.chunk_size,
        max_params=cfg.max_params,
        max_jacobian_numel=cfg.max_jacobian_numel,
        ftol=cfg.ftol,
    )
    if task.full_batch:
        with torch.no_grad():
            m = task.residuals(model, task.batch(0)).numel()
        optimizer.check_jacobian(m, sum(p.numel() for p in model.parameters()))
    return optimizer


OPTION = OptimizerOption(
    "lm", LMConfig, takes_lr=False, check=check, build=build, describe=damped.describe,
)
