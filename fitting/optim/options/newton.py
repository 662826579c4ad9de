"""optimizer=newton: damped Newton with the exact Hessian by double backward through the model's
ops (fitting.optim.newton)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.optim.option import MAX_PARAMS, OptimizerOption, StopConfig
from fitting.optim.options import damped

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fitting.tasks import Task


@dataclass
class NewtonConfig:
    name: str = "newton"
    lr: float | None = None  # refused: damping, not a learning rate, sets the step
    damping: float = 0.0  # initial λ; 0: pure Newton steps while the Hessian allows them
    min_damping: float = 1e-6
    factor: float = 10.0
    max_tries: int = 20
    max_params: int = MAX_PARAMS  # the n×n Hessian's n; more is a config error
    chunk_size: int | None = 32  # Hessian rows per reverse-over-reverse pass
    ftol: float | None = None  # a rise of the loss within ftol·|loss| counts as none
    # Stops by default once converged: a task's 2000-step budget is not 2000 steps of rounding.
    stop: StopConfig = field(default_factory=lambda: StopConfig(patience=3))


def check(cfg: Any, c: Checker) -> None:
    """damping >= 0, min_damping > 0, factor > 1, and the keys shared with lm."""
    damped.check(cfg, c)
    c.at_least("damping", cfg.damping, 0.0)
    c.positive("min_damping", cfg.min_damping)
    if not cfg.factor > 1:
        c.problem(f"{c.key('factor')} must be > 1, got {cfg.factor}")


def build(cfg: Any, model: nn.Module, task: Task) -> torch.optim.Optimizer:
    """Newton on the task's residuals; ConfigError for a model it cannot take."""
    from fitting.optim.newton import Newton

    optimizer = Newton(
        model.parameters(),
        damped.task_residuals("newton", model, task, cfg.max_params),
        reduction=task.reduction,
        damping=cfg.damping,
        min_damping=cfg.min_damping,
        factor=cfg.factor,
        max_tries=cfg.max_tries,
        chunk_size=cfg.chunk_size,
        max_params=cfg.max_params,
        ftol=cfg.ftol,
    )
    return optimizer


OPTION = OptimizerOption(
    "newton", NewtonConfig, takes_lr=False, check=check, build=build, describe=damped.describe,
)
