"""Build the configured optimizer for a model's parameters."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fitting.optim.gradient_descent import GradientDescent
from fitting.train.validate import ConfigError

if TYPE_CHECKING:
    from fitting.tasks import Task

NAMES = ("sgd", "adam", "lbfgs", "newton", "lm")
# Optimizers that take derivatives of residual_fn with torch.func (fitting.optim.second_order).
SECOND_ORDER = ("newton", "lm")


def build_optimizer(
    cfg_optimizer: Any, model: nn.Module, task: Task | None = None
) -> torch.optim.Optimizer | GradientDescent:
    """The optimizer `cfg_optimizer.name` over `model.parameters()`.

    newton and lm work on the task's residuals: they need `task` (its `reduction`; `fit` gives
    them `residual_fn` of each batch) and refuse models whose size or batch-norm statistics
    they cannot handle, with a ConfigError before any step.
    """
    cfg = cfg_optimizer
    if cfg.name in ("sgd", "adam") and cfg.lr <= 0:
        raise ValueError(f"optimizer.lr must be > 0, got {cfg.lr}")
    if cfg.stop.patience < 0 or (cfg.stop.rtol is not None and cfg.stop.rtol < 0):
        raise ValueError(
            f"optimizer.stop: need patience >= 0 and rtol >= 0 (or null), got "
            f"patience={cfg.stop.patience}, rtol={cfg.stop.rtol}"
        )
    if cfg.name == "sgd":
        # SGD's exact update without torch.optim, whose import of torch._dynamo (~1 s) would
        # double the start-up of the default tutorial run (fitting/gradient_descent.py).
        return GradientDescent(
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
    if cfg.name == "lbfgs":
        if cfg.history_size < 1 or cfg.max_eval < 2:
            raise ValueError(
                f"optimizer=lbfgs: need history_size >= 1 and max_eval >= 2, got "
                f"history_size={cfg.history_size}, max_eval={cfg.max_eval}"
            )
        # One iteration per step() so steps count iterations, as for newton and lm. The line
        # search gets max_eval evaluations (with max_iter=1 torch's default, 1.25 * max_iter,
        # would leave it one); zero tolerances: the step budget and stop rule decide when to
        # stop, not LBFGS, whose own checks would end every later step() at once. lr=1: the
        # line search starts from the quasi-Newton step.
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
    if cfg.name in SECOND_ORDER:
        return _second_order(cfg, model, task)
    raise ValueError(f"unknown optimizer {cfg.name!r}; choose one of {', '.join(NAMES)}")


def _second_order(cfg: Any, model: nn.Module, task: Task | None) -> torch.optim.Optimizer:
    """Newton or LevenbergMarquardt on the task's residuals; the loop sets `residual_fn` for
    each batch (fitting.optim.second_order.residual_fn_from_model)."""
    from fitting.optim.levenberg_marquardt import LevenbergMarquardt
    from fitting.optim.newton import Newton

    if task is None:
        raise ValueError(f"optimizer={cfg.name} needs the task (its residuals) to be built")
    _check_model(cfg, model, task)
    common = dict(
        reduction=task.reduction,
        max_tries=cfg.max_tries,
        chunk_size=cfg.chunk_size,
        max_params=cfg.max_params,
        ftol=cfg.ftol,
    )
    def residual_fn(params):
        raise RuntimeError(
            f"optimizer={cfg.name}: no batch yet; set optimizer.residual_fn = "
            "residual_fn_from_model(model, task.residuals, batch) before each step (fit does)"
        )

    if cfg.name == "newton":
        optimizer = Newton(
            model.parameters(),
            residual_fn,
            damping=cfg.damping,
            min_damping=cfg.min_damping,
            factor=cfg.factor,
            **common,
        )
    else:
        optimizer = LevenbergMarquardt(
            model.parameters(),
            residual_fn,
            damping=cfg.damping,
            scaling=_value(cfg.scaling),
            max_jacobian_numel=cfg.max_jacobian_numel,
            **common,
        )
    return optimizer


def _check_model(cfg: Any, model: nn.Module, task: Task) -> None:
    """ConfigError for a model newton/lm cannot take: too many parameters for the n×n matrix,
    state updated in training (batch norm), or a Jacobian beyond max_jacobian_numel (lm)."""
    n = sum(p.numel() for p in model.parameters())
    if n > cfg.max_params:
        raise ConfigError(
            f"optimizer={cfg.name} needs an n×n matrix but the model has {n} parameters, more "
            f"than max_params={cfg.max_params}; use optimizer=lbfgs or adam for this model, "
            f"or raise optimizer.max_params if {n}² entries fit in memory"
        )
    buffers = [name for name, _ in model.named_buffers()]
    if buffers:
        raise ConfigError(
            f"optimizer={cfg.name} needs residuals that are a pure function of the parameters, "
            f"but the {task.name} model updates state in training (buffer {buffers[0]}, e.g. "
            "batch-norm statistics); use optimizer=lbfgs or adam for this model"
        )
    if cfg.name == "lm" and task.full_batch:
        with torch.no_grad():
            m = task.residuals(model, task.batch(0)).numel()
        if m * n > cfg.max_jacobian_numel:
            raise ConfigError(
                f"optimizer=lm needs a {m}×{n} Jacobian ({m * n} entries), more than "
                f"optimizer.max_jacobian_numel={cfg.max_jacobian_numel}; use fewer data points, "
                "optimizer=lbfgs, or raise max_jacobian_numel if it fits in memory"
            )


def _value(option: Enum | str) -> str:
    """An enum option's string (plain strings pass through)."""
    return option.value if isinstance(option, Enum) else option
