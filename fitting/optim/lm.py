"""Levenberg–Marquardt with the Jacobian by forward AD through the model's ops."""

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils import parameters_to_vector

from fitting.optim.derivatives import jacobian
from fitting.optim.newton import Damped, marquardt_scale, require


class LM(Damped):
    """Levenberg–Marquardt on the closure's residuals r: (JᵀJ + μ·D) δ = −Jᵀr by Cholesky, with
    D = diag(JᵀJ) (scaling='marquardt') or its max times I ('levenberg').

    μ starts at `damping` and follows Nielsen's rule: with ρ = actual / predicted decrease of
    Σr², ρ > 0 accepts and sets μ ← μ·max(1/3, 1 − (2ρ − 1)³); otherwise μ ← μ·ν, ν ← 2ν and the
    step is retried, at most `max_tries` times. A change of Σr² within rounding (`ftol`·Σr²,
    default 4 eps) is accepted with μ kept. Takes named parameters (model.named_parameters()):
    the Jacobian comes from `closure.residuals({name: tensor})`.
    """

    name = "lm"

    def __init__(self, params: Iterable[Any], *, damping: float, scaling: str, max_tries: int,
                 max_params: int, max_jacobian_numel: int, ftol: float | None) -> None:
        require([("damping", damping, damping > 0, "> 0"),
                 ("scaling", scaling, scaling in ("marquardt", "levenberg"),
                  "marquardt or levenberg"),
                 ("max_jacobian_numel", max_jacobian_numel, max_jacobian_numel >= 1, ">= 1")],
                "optimizer")
        super().__init__(params, dict(damping=damping, scaling=scaling, max_tries=max_tries,
                                      max_params=max_params, ftol=ftol,
                                      max_jacobian_numel=max_jacobian_numel))
        if "param_names" not in self.param_groups[0]:
            raise ValueError("optimizer=lm takes named parameters: LM(model.named_parameters())")

    def step(self, closure: Callable[[], Tensor]) -> Tensor:  # type: ignore[override]
        """One accepted Levenberg–Marquardt iteration; returns the closure's loss before it."""
        group, mu, nu = self.param_groups[0], self.damping, 2.0
        with torch.enable_grad():
            loss = closure().detach()
        theta = parameters_to_vector(self.params).detach()
        with torch.no_grad():
            r = closure.residuals().reshape(-1)
        if r.numel() * theta.numel() > group["max_jacobian_numel"]:
            raise ValueError(
                f"optimizer=lm needs a {r.numel()}×{theta.numel()} Jacobian, more entries than "
                f"optimizer.max_jacobian_numel={group['max_jacobian_numel']}; use fewer data "
                "points, optimizer=lbfgs, or raise max_jacobian_numel if it fits in memory")
        jac = jacobian(closure.residuals, dict(zip(group["param_names"], self.params, strict=True)))
        jtj, jtr, phi = jac.T @ jac, jac.T @ r, r.square().sum()
        diag = marquardt_scale(jtj.diag())
        if group["scaling"] == "levenberg":
            diag = diag.max().expand_as(diag)
        for tries in range(1, group["max_tries"] + 1):
            chol, info = torch.linalg.cholesky_ex(jtj + (mu * diag).diag())
            if info.item() == 0:
                delta = -torch.cholesky_solve(jtr.unsqueeze(-1), chol).squeeze(-1)
                predicted = delta @ (mu * diag * delta - jtr)  # of Σr², by the linear model
                new_phi = self.residuals_at(theta + delta, closure).square().sum()
                rho = float((phi - new_phi) / predicted)
                # A change within rounding of Σr² says nothing: take the step, keep μ.
                within_noise = bool(abs(new_phi - phi) <= self.noise(phi))
                if within_noise or (math.isfinite(rho) and rho > 0):
                    mu_next = mu if within_noise else mu * max(1 / 3, 1 - (2 * rho - 1) ** 3)
                    self.finish(closure, theta, delta, mu_next, damping=mu, tries=tries)
                    return loss
            # Capped: past ~1e16 relative damping the step is below rounding anyway.
            mu, nu = min(mu * nu, 1e16), 2 * nu
        self.finish(closure, theta, None, mu, damping=mu, tries=group["max_tries"])
        return loss
