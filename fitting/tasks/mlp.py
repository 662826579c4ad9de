"""mlp: an MLP fitting a 1-D target function (mean squared error), full batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from fitting.tasks.shared import Batch, Task, line_figure, range_checks, require
from models.mlp import MLP

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TARGETS: dict[str, Callable[[Tensor], Tensor]] = {
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "abs": torch.abs,
    "square": torch.square, "gauss": lambda x: torch.exp(-(x**2)),
}


def _column(x: Tensor, y: Tensor, device: torch.device | str, dtype: torch.dtype) -> Batch:
    """(x, y) as (n, 1) tensors on `device` in `dtype`."""
    return x.view(-1, 1).to(device, dtype), y.view(-1, 1).to(device, dtype)


class MLPTask(Task):
    """Fit of `target` at n_points evenly spaced x on [x_min, x_max] plus Gaussian noise of std
    `noise`; validation on the noiseless target at n_val points of the same range."""

    name, reduction, slots = "mlp", "mean", ("linear", "activation")
    # A tenth of its SGD lr: early training, where every layer's gradient sets the pace.
    card = (300, ("optimizer.lr=0.01",))

    def __init__(self, *, target: str, x_min: float, x_max: float, n_points: int, noise: float,
                 n_val: int, hidden: list[int], ops: Mapping[str, Callable],
                 device: torch.device | str, dtype: torch.dtype, seed: int) -> None:
        require([("target", target, target in TARGETS, f"one of {', '.join(TARGETS)}"),
                 *range_checks(n_points, x_min, x_max, 1),
                 ("noise", noise, noise >= 0, ">= 0 (the std of the target noise)"),
                 ("n_val", n_val, n_val >= 1, ">= 1"),
                 ("hidden", list(hidden), all(h >= 1 for h in hidden), "a list of sizes >= 1")])
        f, generator = TARGETS[target], torch.Generator().manual_seed(seed)
        # Made in float64 on the CPU: a seed gives the same data on every device and dtype.
        x = torch.linspace(x_min, x_max, n_points, dtype=torch.float64)
        y = f(x) + noise * torch.randn(x.shape, generator=generator, dtype=torch.float64)
        x_val = torch.linspace(x_min, x_max, n_val, dtype=torch.float64)
        self.data, self.val = _column(x, y, device, dtype), _column(x_val, f(x_val), device, dtype)
        self.target, self.noise, self.sizes = target, noise, [1, *hidden, 1]
        self.model = MLP(1, list(hidden), 1, device=device, dtype=dtype, **ops)

    def validate(self, model: MLP) -> float:
        """MSE against the noiseless target on the validation grid."""
        with torch.no_grad():
            return self.residuals(model, self.val).square().mean().item()

    def summary(self, model: MLP) -> dict[str, float]:
        """Training and validation MSE."""
        with torch.no_grad():
            train_mse = self.residuals(model, self.data).square().mean().item()
        return {"train_mse": train_mse, "val_mse": self.validate(model)}

    def describe(self, model: MLP) -> str:
        """Architecture and target in one line."""
        return f"MLP {'-'.join(map(str, self.sizes))} fitting {self.target}(x)"

    def figure(self, model: MLP, step: int) -> Figure:
        """The target, the prediction on the validation grid and the (noisy) training points."""
        title = f"step {step}: {self.describe(model)}, val MSE {self.validate(model):.3g}"
        return line_figure(model, self.val, title, f"target {self.target}(x)",
                           self.data if self.noise > 0 else None)
