"""mlp: an MLP of custom Linear + ReLU layers fitting a 1-D target function (MSE)."""

from __future__ import annotations

from typing import Any

import torch

from fitting.tasks.data import target_function
from fitting.track.figures import FigureSpec
from models.mlp import MLP

Batch = tuple[torch.Tensor, torch.Tensor]


def residuals(model: MLP, batch: Batch) -> torch.Tensor:
    """Prediction minus target, shape (n, 1); the loss is their mean square."""
    x, y = batch
    return model(x) - y


class MLPTask:
    """Full-batch fit of `target` on n_points evenly spaced x (plus noise); validation on the
    noiseless target at n_val points of the same range."""

    name = "mlp"
    reduction = "mean"
    has_validation = True
    full_batch = True
    residuals = staticmethod(residuals)

    def __init__(
        self,
        cfg: Any,
        ops: dict,
        device: torch.device,
        dtype: torch.dtype,
        generator: torch.Generator,
    ) -> None:
        self.target_name = cfg.target.value
        f = target_function(self.target_name)
        x = torch.linspace(cfg.x_min, cfg.x_max, cfg.n_points, dtype=torch.float64)
        y = f(x) + cfg.noise * torch.randn(x.shape, generator=generator, dtype=torch.float64)
        x_val = torch.linspace(cfg.x_min, cfg.x_max, cfg.n_val, dtype=torch.float64)
        # Made in float64 on the CPU so a seed gives the same data on every device and dtype.
        self.data: Batch = _column(x, y, device, dtype)
        self.val: Batch = _column(x_val, f(x_val), device, dtype)
        self.noise = cfg.noise
        self.model = MLP(1, list(cfg.hidden), 1, device=device, dtype=dtype, **ops)

    def batch(self, step: int) -> Batch:
        """The whole training set, every step."""
        return self.data

    def validate(self, model: MLP) -> float:
        """MSE against the noiseless target on the validation grid."""
        with torch.no_grad():
            return residuals(model, self.val).pow(2).mean().item()

    def summary(self, model: MLP) -> dict[str, float]:
        """Final training MSE and validation MSE."""
        with torch.no_grad():
            train_mse = residuals(model, self.data).pow(2).mean().item()
        return {"train_mse": train_mse, "val_mse": self.validate(model)}

    def describe(self, model: MLP) -> str:
        """Architecture and target in one line."""
        sizes = [m.in_features for m in model if hasattr(m, "in_features")] + [1]
        return f"MLP {'-'.join(map(str, sizes))} fitting {self.target_name}(x)"

    def figure(self, model: MLP, step: int) -> FigureSpec:
        """Training points, the target and the prediction on the validation grid."""
        x, y = (t.squeeze(1).cpu().numpy() for t in self.data)
        xv, yv = self.val
        with torch.no_grad():
            pred = model(xv).squeeze(1).cpu().numpy()
        xv, yv = xv.squeeze(1).cpu().numpy(), yv.squeeze(1).cpu().numpy()
        val = float(((pred - yv) ** 2).mean())
        return FigureSpec("line_fit", {
            "x": xv, "target": yv, "pred": pred,
            "title": f"step {step}: {self.describe(model)}, val MSE {val:.3g}",
            "target_label": f"target {self.target_name}(x)",
            "points": (x, y) if self.noise > 0 else None, "color": "C1", "legend": "best",
        })


def _column(x: torch.Tensor, y: torch.Tensor, device: torch.device, dtype: torch.dtype) -> Batch:
    """(x, y) as (n, 1) tensors on `device` in `dtype`."""
    return x.view(-1, 1).to(device, dtype), y.view(-1, 1).to(device, dtype)
