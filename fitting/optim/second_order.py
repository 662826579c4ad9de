"""Shared machinery of the second-order optimizers: the residual contract, flat parameters, limits.

The contract: a second-order optimizer is built on `residual_fn(params) -> Tensor`, a *pure*
function that takes a sequence of tensors shaped like the optimizer's parameters (same order) and
returns the residual vector (any shape; it is flattened). The optimizer calls it with its own
functorch-wrapped tensors to get exact derivatives (`torch.func` transforms), so it must compute
through the model's own ops (e.g. `legendre_p3`) from its arguments only: no reads of the module's
Parameters, no in-place writes to the arguments, no `.item()` on them, and deterministic (no
dropout, no batch-norm statistics updates: eval-mode layers). Fixed data (x, y) is captured by
the closure. `residual_fn_from_model` builds one from a module and a task's
`residuals(model, batch)` with `torch.func.functional_call`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from fitting.checks import ConfigError

ResidualFn = Callable[[Sequence[torch.Tensor]], torch.Tensor]
REDUCTIONS = ("sum", "mean")


class _BoundResiduals(nn.Module):
    """`residuals(model, batch)` as a module, so `functional_call` can swap the model's tensors."""

    def __init__(self, model: nn.Module, residuals: Callable[..., torch.Tensor], batch: Any):
        super().__init__()
        self.model = model
        self._residuals = residuals
        self._batch = batch

    def forward(self) -> torch.Tensor:
        return self._residuals(self.model, self._batch)


def residual_fn_from_model(
    model: nn.Module, residuals: Callable[..., torch.Tensor], batch: Any
) -> ResidualFn:
    """A residual_fn over `model.parameters()` (in that order) from `residuals(model, batch)`."""
    bound = _BoundResiduals(model, residuals, batch)
    names = [f"model.{name}" for name, _ in model.named_parameters()]

    def residual_fn(params: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(params) != len(names):
            raise ValueError(
                f"residual_fn: got {len(params)} tensors for {len(names)} model parameters; "
                "build the optimizer on model.parameters()"
            )
        return torch.func.functional_call(bound, dict(zip(names, params, strict=True)), ())

    return residual_fn


def check_size(name: str, n: int, max_params: int) -> None:
    """ConfigError if `n` parameters are more than optimizer=`name` takes (`max_params`)."""
    if n > max_params:
        raise ConfigError(
            f"optimizer={name} needs an n×n matrix but the model has {n} parameters, "
            f"more than max_params={max_params}; use optimizer=lbfgs or adam for this model, "
            f"or raise optimizer.max_params if {n}² entries fit in memory"
        )


class SecondOrderOptimizer(torch.optim.Optimizer):
    """Base of Newton and LM: one parameter group seen as one flat vector θ, a parameter limit."""

    name = "second-order"

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        residual_fn: ResidualFn,
        reduction: str,
        max_params: int,
        defaults: dict[str, Any],
    ):
        if reduction not in REDUCTIONS:
            raise ValueError(
                f"{self.name}: reduction must be one of {REDUCTIONS}, not {reduction!r}"
            )
        if not callable(residual_fn):
            raise TypeError(f"{self.name}: residual_fn must be callable(params) -> residuals")
        super().__init__(params, dict(defaults, reduction=reduction, max_params=max_params))
        if len(self.param_groups) != 1:
            raise ValueError(
                f"{self.name}: supports one parameter group, got {len(self.param_groups)}"
            )
        # Checked before anything of size n² exists: the limit is what turns an out-of-memory
        # (or an hour-long solve) into a config error.
        check_size(self.name, sum(p.numel() for p in self.param_groups[0]["params"]), max_params)
        self.residual_fn = residual_fn
        self._params: list[torch.Tensor] = self.param_groups[0]["params"]
        self.last_stats: dict[str, float] = {}

    @property
    def _group(self) -> dict[str, Any]:
        return self.param_groups[0]

    @property
    def _state(self) -> dict[str, Any]:
        # Damping lives in the first parameter's state so state_dict() checkpoints it (as LBFGS).
        return self.state[self._params[0]]

    def _flat(self) -> torch.Tensor:
        """The current parameters as one detached vector θ (a copy)."""
        return torch.cat([p.detach().reshape(-1) for p in self._params])

    def _unflatten(self, theta: torch.Tensor) -> list[torch.Tensor]:
        out, offset = [], 0
        for p in self._params:
            out.append(theta[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return out

    def _write(self, theta: torch.Tensor) -> None:
        with torch.no_grad():
            for p, new in zip(self._params, self._unflatten(theta), strict=True):
                p.copy_(new)

    def _residuals(self, theta: torch.Tensor) -> torch.Tensor:
        return self.residual_fn(self._unflatten(theta)).reshape(-1)

    def _loss(self, theta: torch.Tensor) -> torch.Tensor:
        """The objective reduction(r(θ)²)."""
        sq = self._residuals(theta).square()
        return sq.sum() if self._group["reduction"] == "sum" else sq.mean()

    def _noise(self, value: torch.Tensor) -> torch.Tensor:
        """The rounding level of a loss value: changes below it are not progress or regress."""
        ftol = self._group["ftol"]
        if ftol is None:
            ftol = 4 * torch.finfo(value.dtype).eps
        return ftol * value.abs()

    def _start_step(self, closure: Callable[[], torch.Tensor] | None) -> torch.Tensor | None:
        """Run the loop's closure (loss and .grad as for any optimizer) before the update."""
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()


def damping_scale(diag: torch.Tensor) -> torch.Tensor:
    """Marquardt's diagonal scaling |diag|, floored so a flat direction still gets damped."""
    d = diag.abs()
    return d.clamp_min(torch.finfo(d.dtype).eps * d.max().clamp_min(1.0))


def step_stats(
    loss: torch.Tensor,
    new_loss: torch.Tensor,
    grad: torch.Tensor,
    damping: float,
    delta: torch.Tensor,
    theta: torch.Tensor,
    accepted: bool,
    tries: int,
) -> dict[str, float]:
    """Per-step numbers for logging (plain floats)."""
    step_norm = float(delta.norm())
    return {
        "loss": float(loss),
        "new_loss": float(new_loss),
        "grad_norm": float(grad.norm()),
        "damping": float(damping),
        "step_norm": step_norm,
        "rel_step": step_norm / max(float(theta.norm()), torch.finfo(theta.dtype).tiny),
        "accepted": float(accepted),
        "tries": float(tries),
    }
