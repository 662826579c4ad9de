"""Levenberg–Marquardt with the Jacobian from forward-mode AD through the model's ops."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from fitting.checks import ConfigError
from fitting.optim.option import MAX_PARAMS
from fitting.optim.second_order import ResidualFn, SecondOrderOptimizer, damping_scale, step_stats

SCALINGS = ("marquardt", "levenberg")


class LevenbergMarquardt(SecondOrderOptimizer):
    """Levenberg–Marquardt on the residuals r(θ) = residual_fn(θ), F = reduction(r²).

    `LevenbergMarquardt(model.parameters(), residual_fn=..., reduction="sum")`; `residual_fn`
    follows the contract in `fitting.optim.second_order`. Each `step(closure)` is one accepted
    iteration:

    - J = ∂r/∂θ by forward-mode AD, `torch.func.jacfwd` (the ops' `jvp` rules), over at most
      `chunk_size` parameters at a time so memory stays ~chunk_size forward passes;
    - the step solves (JᵀJ + μ·D) δ = −Jᵀr by Cholesky, with D = diag(JᵀJ) (scaling='marquardt',
      invariant to rescaling a parameter) or max(diag JᵀJ)·I (scaling='levenberg');
    - μ (starting at `damping`) follows Nielsen's rule: the gain ratio ρ = actual / predicted
      decrease of Σr²; ρ > 0 accepts and sets μ ← μ·max(1/3, 1 − (2ρ − 1)³); otherwise μ ← μ·ν,
      ν ← 2ν, and the step is retried, at most `max_tries` times (then the parameters stay put);
      a change of Σr² within rounding (`ftol`·Σr², default 4 eps of the dtype) is accepted with
      μ kept, so steps still polish the gradient where Σr² no longer resolves progress (float32).

    The step does not depend on the reduction (sum or mean only rescale F); ‖∇F‖ and the losses
    in `last_stats` do (same keys as `Newton.last_stats`; damping is μ of the accepted step).
    `step` returns the closure's loss (before the update) or F(θ) without a closure. More than
    `max_params` parameters, or a Jacobian of more than `max_jacobian_numel` entries, is refused
    (ConfigError). The app checks the other settings' ranges (fitting.optim.specs.lm).
    """

    name = "lm"

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        residual_fn: ResidualFn,
        reduction: str = "sum",
        damping: float = 1e-3,
        scaling: str = "marquardt",
        max_tries: int = 10,
        chunk_size: int = 64,
        max_params: int = MAX_PARAMS,
        max_jacobian_numel: int = 50_000_000,
        ftol: float | None = None,
    ):
        if scaling not in SCALINGS:
            raise ValueError(f"lm: scaling must be one of {SCALINGS}, not {scaling!r}")
        defaults = dict(
            damping=damping,
            scaling=scaling,
            max_tries=max_tries,
            chunk_size=chunk_size,
            max_jacobian_numel=max_jacobian_numel,
            ftol=ftol,
        )
        super().__init__(params, residual_fn, reduction, max_params, defaults)

    def _jacobian(self, theta: torch.Tensor) -> torch.Tensor:
        """J = ∂r/∂θ (m × n) by forward-mode AD, `chunk_size` columns per `jacfwd`."""
        columns, n, size = [], theta.numel(), self._group["chunk_size"]
        for lo in range(0, n, size):
            hi = min(lo + size, n)

            def residuals_of_chunk(s: torch.Tensor, lo: int = lo, hi: int = hi) -> torch.Tensor:
                return self._residuals(torch.cat((theta[:lo], s, theta[hi:])))

            columns.append(torch.func.jacfwd(residuals_of_chunk)(theta[lo:hi]))
        return torch.cat(columns, dim=1)

    def check_jacobian(self, m: int, n: int) -> None:
        """ConfigError if the m×n Jacobian has more than max_jacobian_numel entries."""
        limit = self._group["max_jacobian_numel"]
        if m * n > limit:
            raise ConfigError(
                f"optimizer=lm needs a {m}×{n} Jacobian ({m * n} entries), more than "
                f"optimizer.max_jacobian_numel={limit}; use fewer data points (per batch), "
                "optimizer=lbfgs, or raise max_jacobian_numel if it fits in memory"
            )

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor:
        """One accepted Levenberg–Marquardt iteration; returns the loss before it."""
        closure_loss = self._start_step(closure)
        group, state = self._group, self._state
        mu, nu = state.get("damping", group["damping"]), 2.0
        theta = self._flat()
        with torch.no_grad():
            r = self._residuals(theta)
        self.check_jacobian(r.numel(), theta.numel())
        jac = self._jacobian(theta)
        jtj, jtr = jac.T @ jac, jac.T @ r
        diag = damping_scale(torch.diagonal(jtj))
        if group["scaling"] == "levenberg":
            diag = diag.max().expand_as(diag)
        phi = r.square().sum()
        accepted, tries, new_phi, delta, used = False, 0, phi, torch.zeros_like(theta), mu
        within_noise = False
        while tries < group["max_tries"] and not accepted:
            tries, used = tries + 1, mu
            chol, info = torch.linalg.cholesky_ex(jtj + torch.diag(mu * diag))
            if info.item() == 0:
                delta = -torch.cholesky_solve(jtr.unsqueeze(-1), chol).squeeze(-1)
                # Predicted decrease of Σr² under the linear model: δᵀ(μDδ − Jᵀr) ≥ 0.
                predicted = delta @ (mu * diag * delta - jtr)
                with torch.no_grad():
                    new_phi = self._residuals(theta + delta).square().sum()
                rho = float((phi - new_phi) / predicted)
                # A change within rounding of Σr² says nothing: take the step, keep μ.
                within_noise = bool(abs(new_phi - phi) <= self._noise(phi))
                accepted = (math.isfinite(rho) and rho > 0) or within_noise
            if accepted and not within_noise:
                mu *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
            elif not accepted:
                # Capped: past ~1e16 relative damping the step is below rounding anyway.
                mu, nu = min(mu * nu, 1e16), 2.0 * nu
        state["damping"] = mu
        if accepted:
            self._write(theta + delta)
        else:
            new_phi, delta = phi, torch.zeros_like(theta)
        scale = 1.0 if group["reduction"] == "sum" else 1.0 / r.numel()
        self.last_stats = step_stats(
            phi * scale, new_phi * scale, 2 * scale * jtr, used, delta, theta, accepted, tries
        )
        return closure_loss if closure_loss is not None else (phi * scale).detach()
