"""optimizer=sgd: torch.optim.SGD (momentum=0: the tutorial's update up to rounding, see gd)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.optim.option import OptimizerOption, StopConfig

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class SGDConfig:
    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    stop: StopConfig = field(default_factory=StopConfig)


def check(cfg: Any, c: Checker) -> None:
    """Momentum, dampening and weight decay >= 0; Nesterov needs momentum and no dampening."""
    c.at_least("weight_decay", cfg.weight_decay, 0.0)
    c.at_least("momentum", cfg.momentum, 0.0)
    c.at_least("dampening", cfg.dampening, 0.0)
    if cfg.nesterov and (cfg.momentum <= 0 or cfg.dampening != 0):
        c.problem(
            f"{c.key('nesterov')}=true needs {c.key('momentum')} > 0 and {c.key('dampening')}=0, "
            f"got momentum={cfg.momentum}, dampening={cfg.dampening}"
        )


def build(cfg: Any, model: nn.Module, task: Any) -> torch.optim.Optimizer:
    """torch.optim.SGD over the model's parameters."""
    import torch

    return torch.optim.SGD(
        model.parameters(),
        lr=cfg.lr,
        momentum=cfg.momentum,
        dampening=cfg.dampening,
        weight_decay=cfg.weight_decay,
        nesterov=cfg.nesterov,
    )


OPTION = OptimizerOption("sgd", SGDConfig, takes_lr=True, check=check, build=build)
