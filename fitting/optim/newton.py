"""Damped Newton with the exact Hessian from double backward through the model's ops."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from fitting.optim.option import MAX_PARAMS
from fitting.optim.second_order import ResidualFn, SecondOrderOptimizer, damping_scale, step_stats


class Newton(SecondOrderOptimizer):
    """Newton's method on F(θ) = reduction(residual_fn(θ)²) with Levenberg damping as fallback.

    `Newton(model.parameters(), residual_fn=..., reduction="sum")`; `residual_fn(params)` follows
    the contract in `fitting.optim.second_order` (a pure function of tensors shaped like the
    parameters, e.g. from `residual_fn_from_model`). Each `step(closure)` is one accepted iteration:

    - gradient g and Hessian H of F by reverse-over-reverse AD (`jacrev(grad(F))`, i.e. double
      backward through every op of the model, custom ones included), `chunk_size` rows at a time;
    - the step solves (H + λ·D) δ = −g by Cholesky, D = Marquardt's |diag H| scaling; λ starts at
      `damping` (0: a pure Newton step) and grows ×`factor` (from `min_damping`) whenever H + λD is
      not positive definite or the step does not lower F; an accepted step divides λ by `factor`,
      and λ below `min_damping` becomes 0 again, so near the optimum the steps are pure Newton;
    - a rise of F within rounding (`ftol`·|F|, default 4 eps of the dtype) counts as no rise, so
      steps still polish the gradient where F no longer resolves progress (float32);
    - after `max_tries` rejections the parameters stay put (F cannot be lowered at this precision).

    `step` returns the closure's loss (evaluated before the update, as torch.optim does) or F(θ)
    without a closure. `last_stats` holds loss, new_loss, grad_norm (‖∇F‖ before the step),
    damping (λ of the accepted step), step_norm, rel_step (‖δ‖/‖θ‖), accepted, tries.
    More than `max_params` parameters is refused at construction. The app checks the other
    settings' ranges (fitting.optim.specs.newton).
    """

    name = "newton"

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        residual_fn: ResidualFn,
        reduction: str = "sum",
        damping: float = 0.0,
        min_damping: float = 1e-6,
        factor: float = 10.0,
        max_tries: int = 20,
        chunk_size: int | None = 32,
        max_params: int = MAX_PARAMS,
        ftol: float | None = None,
    ):
        defaults = dict(
            damping=damping,
            min_damping=min_damping,
            factor=factor,
            max_tries=max_tries,
            chunk_size=chunk_size,
            ftol=ftol,
        )
        super().__init__(params, residual_fn, reduction, max_params, defaults)

    def _grad_hessian(self, theta: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(F, ∇F, ∇²F) at θ by double backward."""

        def grad_and_aux(t: torch.Tensor):
            g, loss = torch.func.grad_and_value(self._loss)(t)
            return g, (g, loss)

        jac = torch.func.jacrev(grad_and_aux, has_aux=True, chunk_size=self._group["chunk_size"])
        hess, (grad, loss) = jac(theta)
        return loss, grad, hess

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor:
        """One accepted damped-Newton iteration; returns the loss before it."""
        closure_loss = self._start_step(closure)
        group, state = self._group, self._state
        lam = state.get("damping", group["damping"])
        theta = self._flat()
        loss, grad, hess = self._grad_hessian(theta)
        scale = torch.diag(damping_scale(torch.diagonal(hess)))
        accepted, tries, new_loss, delta = False, 0, loss, torch.zeros_like(theta)
        while tries < group["max_tries"] and not accepted:
            tries += 1
            chol, info = torch.linalg.cholesky_ex(hess + lam * scale)
            if info.item() == 0:
                delta = -torch.cholesky_solve(grad.unsqueeze(-1), chol).squeeze(-1)
                with torch.no_grad():
                    new_loss = self._loss(theta + delta)
                accepted = bool(torch.isfinite(new_loss) and new_loss <= loss + self._noise(loss))
            if not accepted:
                lam = max(lam * group["factor"], group["min_damping"])
        if accepted:
            self._write(theta + delta)
            lam_next = lam / group["factor"]
            state["damping"] = lam_next if lam_next >= group["min_damping"] else 0.0
        else:
            state["damping"] = lam
            new_loss, delta = loss, torch.zeros_like(theta)
        self.last_stats = step_stats(loss, new_loss, grad, lam, delta, theta, accepted, tries)
        return closure_loss if closure_loss is not None else loss.detach()
