"""optimizer=gd: the tutorial's plain gradient descent, p -= lr * p.grad (GradientDescent)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.optim.option import OptimizerOption, StopConfig

if TYPE_CHECKING:
    from torch import nn

    from fitting.optim.gradient_descent import GradientDescent


@dataclass
class GDConfig:
    name: str = "gd"
    lr: float = 0.01
    stop: StopConfig = field(default_factory=StopConfig)


def check(cfg: Any, c: Checker) -> None:
    """Nothing beyond lr and stop, which every optimizer's config has checked."""


def build(cfg: Any, model: nn.Module, task: Any) -> GradientDescent:
    """GradientDescent over the model's parameters."""
    from fitting.optim.gradient_descent import GradientDescent

    return GradientDescent(model.parameters(), lr=cfg.lr)


OPTION = OptimizerOption("gd", GDConfig, takes_lr=True, check=check, build=build)
