"""Build the configured torch.optim optimizer for a model's parameters."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def build_optimizer(cfg_optimizer: Any, model: nn.Module) -> torch.optim.Optimizer:
    """The optimizer named `cfg_optimizer.name` (sgd, adam) over `model.parameters()`."""
    cfg = cfg_optimizer
    if cfg.lr <= 0:
        raise ValueError(f"optimizer.lr must be > 0, got {cfg.lr}")
    if cfg.name == "sgd":
        return torch.optim.SGD(
            model.parameters(),
            lr=cfg.lr,
            momentum=cfg.momentum,
            dampening=cfg.dampening,
            weight_decay=cfg.weight_decay,
            nesterov=cfg.nesterov,
        )
    if cfg.name == "adam":
        return torch.optim.Adam(
            model.parameters(),
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            amsgrad=cfg.amsgrad,
        )
    raise ValueError(f"unknown optimizer {cfg.name!r}; choose sgd or adam")
