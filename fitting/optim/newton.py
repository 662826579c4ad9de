"""Damped Newton with the exact Hessian by double backward through the model's ops."""

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils import parameters_to_vector

from fitting.optim.derivatives import flatten, hessian
from fitting.tasks.shared import require


def marquardt_scale(diag: Tensor) -> Tensor:
    """Marquardt's diagonal scaling |diag|, floored so that a flat direction is damped too."""
    d = diag.abs()
    return d.clamp_min(torch.finfo(d.dtype).eps * d.max().clamp_min(1.0))


class Damped(torch.optim.Optimizer):
    """What newton and lm share: at most `max_params` parameters seen as one vector θ, candidate
    steps tried in place, the damping kept in the state (so checkpoints hold it)."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        d = defaults
        require([("max_tries", d["max_tries"], d["max_tries"] >= 1, ">= 1"),
                 ("max_params", d["max_params"], d["max_params"] >= 1, ">= 1"),
                 ("ftol", d["ftol"], (d["ftol"] or 0) >= 0, ">= 0 or null")], "optimizer")
        super().__init__(params, defaults)
        self.params: list[Tensor] = self.param_groups[0]["params"]
        n = sum(p.numel() for p in self.params)
        # Checked before anything n×n exists: the limit turns an out-of-memory into one line.
        if n > d["max_params"]:
            raise ValueError(
                f"optimizer={self.name} needs an n×n matrix but the model has {n} parameters, "
                f"more than optimizer.max_params={d['max_params']}; use optimizer=lbfgs or adam "
                f"for this model, or raise optimizer.max_params if {n}² entries fit in memory")
        self.last_stats: dict[str, float] = {}

    @property
    def damping(self) -> float:
        """The damping the next step starts from."""
        return self.state[self.params[0]].get("damping", self.param_groups[0]["damping"])

    @torch.no_grad()
    def residuals_at(self, theta: Tensor, closure: Any) -> Tensor:
        """The residuals with the parameters set to θ (and left there)."""
        for p, new in zip(self.params, theta.split([p.numel() for p in self.params]), strict=True):
            p.copy_(new.view_as(p))
        return closure.residuals().reshape(-1)

    def noise(self, value: Tensor) -> Tensor:
        """The rounding level of a loss value: changes below it are neither progress nor loss."""
        ftol = self.param_groups[0]["ftol"]
        return (4 * torch.finfo(value.dtype).eps if ftol is None else ftol) * value.abs()

    def finish(self, closure: Any, theta: Tensor, delta: Tensor | None, damping_next: float,
               **stats: float) -> None:
        """Leave the parameters at θ + δ (at θ if no step was accepted), keep the next damping."""
        grad = flatten([p.grad for p in self.params], self.params)  # the closure's, at θ
        if delta is None:
            self.residuals_at(theta, closure)
        self.state[self.params[0]]["damping"] = damping_next
        self.last_stats = {"grad_norm": float(grad.norm()), "accepted": float(delta is not None),
                           "step_norm": 0.0 if delta is None else float(delta.norm()), **stats}


class Newton(Damped):
    """Newton's method on the closure's loss, (H + λ·D) δ = −g by Cholesky with D = |diag H|.

    λ starts at `damping` (0: pure Newton steps) and grows ×`factor` (from `min_damping`) while
    H + λD is not positive definite or the step does not lower the loss (a rise within
    `ftol`·|loss|, default 4 eps, counts as none); an accepted step divides it by `factor`, below
    `min_damping` it is 0 again. After `max_tries` rejections the parameters stay put.
    """

    name = "newton"

    def __init__(self, params: Iterable[Any], *, damping: float, min_damping: float,
                 factor: float, max_tries: int, max_params: int, ftol: float | None) -> None:
        require([("damping", damping, damping >= 0, ">= 0"),
                 ("min_damping", min_damping, min_damping > 0, "> 0"),
                 ("factor", factor, factor > 1, "> 1")], "optimizer")
        super().__init__(params, dict(damping=damping, min_damping=min_damping, factor=factor,
                                      max_tries=max_tries, max_params=max_params, ftol=ftol))

    def step(self, closure: Callable[[], Tensor]) -> Tensor:  # type: ignore[override]
        """One accepted damped-Newton iteration; returns the closure's loss before it."""
        group, lam = self.param_groups[0], self.damping
        with torch.enable_grad():
            loss = closure().detach()
            hess = hessian(lambda: closure.reduce(closure.residuals()), self.params)
        grad = flatten([p.grad for p in self.params], self.params)
        theta, scale = parameters_to_vector(self.params).detach(), marquardt_scale(hess.diag())
        for tries in range(1, group["max_tries"] + 1):
            chol, info = torch.linalg.cholesky_ex(hess + lam * scale.diag())
            if info.item() == 0:
                delta = -torch.cholesky_solve(grad.unsqueeze(-1), chol).squeeze(-1)
                new = closure.reduce(self.residuals_at(theta + delta, closure))
                if torch.isfinite(new) and new <= loss + self.noise(loss):
                    lam_next = lam / group["factor"]
                    lam_next = lam_next if lam_next >= group["min_damping"] else 0.0
                    self.finish(closure, theta, delta, lam_next, damping=lam, tries=tries)
                    return loss
            lam = max(lam * group["factor"], group["min_damping"])
        self.finish(closure, theta, None, lam, damping=lam, tries=group["max_tries"])
        return loss
