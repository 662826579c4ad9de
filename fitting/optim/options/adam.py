"""optimizer=adam: torch.optim.Adam."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.optim.option import OptimizerOption, StopConfig

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class AdamConfig:
    name: str = "adam"
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    stop: StopConfig = field(default_factory=StopConfig)


def check(cfg: Any, c: Checker) -> None:
    """Two betas in [0, 1); eps and weight decay >= 0."""
    c.at_least("weight_decay", cfg.weight_decay, 0.0)
    betas = list(cfg.betas)
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        c.problem(f"{c.key('betas')} must be two numbers in [0, 1), got {betas}")
    c.at_least("eps", cfg.eps, 0.0)


def build(cfg: Any, model: nn.Module, task: Any) -> torch.optim.Optimizer:
    """torch.optim.Adam over the model's parameters."""
    import torch

    return torch.optim.Adam(
        model.parameters(),
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        amsgrad=cfg.amsgrad,
    )


OPTION = OptimizerOption("adam", AdamConfig, takes_lr=True, check=check, build=build)
