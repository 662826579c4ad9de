"""task=poly3: the tutorial experiment, y = sin(x) fitted by y = a + b * P3(c + d x)
(fitting.tasks.poly3)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.tasks.option import TaskOption
from models.poly3 import TUTORIAL_START

if TYPE_CHECKING:
    import torch

    from fitting.tasks.poly3 import Poly3Task


@dataclass
class Poly3Init:
    """The starting parameters; the tutorial's by default."""

    a: float = TUTORIAL_START["a"]
    b: float = TUTORIAL_START["b"]
    c: float = TUTORIAL_START["c"]
    d: float = TUTORIAL_START["d"]


@dataclass
class Poly3Config:
    name: str = "poly3"
    n_points: int = 2000
    x_min: float = -math.pi
    x_max: float = math.pi
    init: Poly3Init = field(default_factory=Poly3Init)


def check(cfg: Any, c: Checker) -> None:
    """At least 2 points on a finite range; finite initial parameters."""
    c.at_least("n_points", cfg.n_points, 2)
    c.finite_range("x_min", cfg.x_min, "x_max", cfg.x_max)
    for key in ("a", "b", "c", "d"):
        value = getattr(cfg.init, key)
        if not math.isfinite(value):
            c.problem(f"{c.key('init.' + key)} must be finite, got {value}")


def build(
    cfg: Any, ops: dict, device: torch.device, dtype: torch.dtype, generator: torch.Generator
) -> Poly3Task:
    """The poly3 task (no random data: `generator` is not used)."""
    from fitting.tasks.poly3 import Poly3Task

    return Poly3Task(cfg, ops, device, dtype)


OPTION = TaskOption("poly3", Poly3Config, check, build, slots=("legendre_p3",))
