"""poly3: the tutorial experiment, y = sin(x) fitted by y = a + b * P3(c + d x)."""

from __future__ import annotations

import math
from typing import Any

import torch

from fitting.tasks.poly3_optimum import exact_poly3_optimum
from fitting.track.figures import FigureSpec
from models.poly3 import Poly3

Batch = tuple[torch.Tensor, torch.Tensor]


def residuals(model: Poly3, batch: Batch) -> torch.Tensor:
    """y_pred - y; the loss is their sum of squares, as in the tutorial."""
    x, y = batch
    return model(x) - y


class Poly3Task:
    """Full-batch fit of sin on [x_min, x_max] (n_points points); no validation set."""

    name = "poly3"
    reduction = "sum"
    has_validation = False
    full_batch = True
    residuals = staticmethod(residuals)

    def __init__(self, cfg: Any, ops: dict, device: torch.device, dtype: torch.dtype) -> None:
        x = torch.linspace(cfg.x_min, cfg.x_max, cfg.n_points, device=device, dtype=dtype)
        self.data: Batch = (x, torch.sin(x))
        # The least-squares optimum is known in closed form on the tutorial's range: [-π, π]
        # (of these n_points in this dtype); None elsewhere.
        tutorial_range = (cfg.x_min, cfg.x_max) == (-math.pi, math.pi)
        self.optimum = exact_poly3_optimum(dtype, cfg.n_points) if tutorial_range else None
        init = cfg.init
        self.model = Poly3(init.a, init.b, init.c, init.d, ops["legendre_p3"], device, dtype)

    def batch(self, step: int) -> Batch:
        """The whole data set, every step."""
        return self.data

    def validate(self, model: Poly3) -> float:
        """Not used: poly3 has no validation set."""
        raise NotImplementedError("poly3 has no validation set")

    def summary(self, model: Poly3) -> dict[str, float]:
        """The four fitted parameters; on the tutorial's x range also the exact optimum's loss
        and the relative gap to it of the loss at these parameters, evaluated in float64."""
        out = {name: p.item() for name, p in model.named_parameters()}
        if self.optimum is not None:
            x, y = (t.double() for t in self.data)
            params = {name: p.detach().double() for name, p in model.named_parameters()}
            with torch.no_grad():
                pred = torch.func.functional_call(model, params, (x,))
            loss = (pred - y).square().sum().item()
            out["optimum_loss"] = self.optimum.loss
            out["rel_gap"] = (loss - self.optimum.loss) / self.optimum.loss
        return out

    def describe(self, model: Poly3) -> str:
        """The fitted formula, y = a + b * P3(c + d x) with the numbers."""
        return model.formula()

    def figure(self, model: Poly3, step: int) -> FigureSpec:
        """sin(x) and the fit, the current formula in the title."""
        x, y = self.data
        with torch.no_grad():
            pred = model(x)
        return FigureSpec("line_fit", {
            "x": x.cpu().numpy(), "target": y.cpu().numpy(), "pred": pred.cpu().numpy(),
            "title": f"step {step}: {model.formula(digits=4)}", "target_label": "target sin(x)",
        })
