"""task=mlp: an MLP of custom Linear + ReLU layers fitting a 1-D target (fitting.tasks.mlp)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.tasks.option import TaskOption

if TYPE_CHECKING:
    import torch

    from fitting.tasks.mlp import MLPTask


class Target(Enum):
    """1-D target functions of the mlp task (fitting.tasks.data.TARGETS)."""

    sin = "sin"
    cos = "cos"
    tanh = "tanh"
    abs = "abs"
    square = "square"
    gauss = "gauss"


@dataclass
class MLPConfig:
    name: str = "mlp"
    target: Target = Target.sin
    x_min: float = -math.pi
    x_max: float = math.pi
    n_points: int = 256
    noise: float = 0.0  # std of Gaussian noise added to the training targets
    n_val: int = 1000  # noiseless points on the same range for loss/val
    hidden: list[int] = field(default_factory=lambda: [64, 64])


def check(cfg: Any, c: Checker) -> None:
    """At least one point on a finite range, a validation set, noise >= 0, layers of >= 1."""
    c.at_least("n_points", cfg.n_points, 1)
    c.finite_range("x_min", cfg.x_min, "x_max", cfg.x_max)
    c.at_least("n_val", cfg.n_val, 1)
    c.at_least("noise", cfg.noise, 0.0, "(the std of the target noise)")
    hidden = list(cfg.hidden)
    if any(h < 1 for h in hidden):
        c.problem(f"{c.key('hidden')} sizes must be >= 1, got {hidden}")


def build(
    cfg: Any, ops: dict, device: torch.device, dtype: torch.dtype, generator: torch.Generator
) -> MLPTask:
    """The mlp task, its noise drawn from `generator`."""
    from fitting.tasks.mlp import MLPTask

    return MLPTask(cfg, ops, device, dtype, generator)


OPTION = TaskOption("mlp", MLPConfig, check, build, slots=("linear", "activation"))
