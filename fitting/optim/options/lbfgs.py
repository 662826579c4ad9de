"""optimizer=lbfgs: torch.optim.LBFGS with strong-Wolfe line search, one iteration per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.optim.option import OptimizerOption, StopConfig

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class LBFGSConfig:
    name: str = "lbfgs"
    lr: float | None = None  # refused: the strong-Wolfe line search picks each step length
    history_size: int = 100
    max_eval: int = 25  # loss+gradient evaluations per iteration (the line search's budget)
    # Stops by default once converged: a task's 2000-step budget is not 2000 steps of rounding.
    stop: StopConfig = field(default_factory=lambda: StopConfig(patience=3))


def check(cfg: Any, c: Checker) -> None:
    """A history of >= 1 and a line search of >= 2 evaluations."""
    c.at_least("history_size", cfg.history_size, 1)
    c.at_least("max_eval", cfg.max_eval, 2, "(the line search's evaluations)")


def build(cfg: Any, model: nn.Module, task: Any) -> torch.optim.Optimizer:
    """torch.optim.LBFGS doing one iteration per step(), so steps count iterations."""
    import torch

    # The line search gets max_eval evaluations (with max_iter=1 torch's default, 1.25 *
    # max_iter, would leave it one); zero tolerances: the step budget and stop rule decide when
    # to stop, not LBFGS, whose own checks would end every later step() at once. lr=1: the line
    # search starts from the quasi-Newton step.
    return torch.optim.LBFGS(
        model.parameters(),
        lr=1.0,
        max_iter=1,
        max_eval=cfg.max_eval,
        tolerance_grad=0.0,
        tolerance_change=0.0,
        history_size=cfg.history_size,
        line_search_fn="strong_wolfe",
    )


def describe(cfg: Any) -> str:
    """The start-up line's optimizer part."""
    return f"lbfgs (strong-Wolfe line search, max_eval={cfg.max_eval})"


OPTION = OptimizerOption(
    "lbfgs", LBFGSConfig, takes_lr=False, check=check, build=build, describe=describe
)
