"""poly3: the tutorial, y = sin(x) fitted by y = a + b·P3(c + d·x), summed squared errors."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from fitting.tasks.optimum import poly3_optimum
from fitting.tasks.shared import Batch, Task, line_figure, range_checks, require
from models.ops import legendre_p3_reference
from models.poly3 import Poly3

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class Poly3Task(Task):
    """Full-batch fit of sin at n_points on [x_min, x_max] from the start `init` (a, b, c, d);
    no validation set. The data are made as the tutorial makes them, in `dtype`."""

    name, reduction, slots, card = "poly3", "sum", ("legendre_p3",), (100, ())

    def __init__(self, *, n_points: int, x_min: float, x_max: float, init: Mapping[str, float],
                 ops: Mapping[str, Callable], device: torch.device | str, dtype: torch.dtype,
                 seed: int) -> None:
        require([*range_checks(n_points, x_min, x_max, 2),
                 *((f"init.{k}", init[k], math.isfinite(init[k]), "finite") for k in "abcd")])
        # On the CPU, then moved: every device fits the same numbers.
        x = torch.linspace(x_min, x_max, n_points, dtype=dtype)
        self.data: Batch = (x.to(device), torch.sin(x).to(device))
        self.model = Poly3(*(init[k] for k in "abcd"), device=device, dtype=dtype, **ops)

    def validate(self, model: Poly3) -> None:
        """None: poly3 has no validation set."""
        return None

    def summary(self, model: Poly3) -> dict[str, float]:
        """a, b, c, d; where the data have one and the op computes P3 (its twin's values at
        c + d·x), the exact optimum's loss and the relative gap to it of the loss at a, b, c, d,
        both in float64 (of the data as made, in the run's dtype)."""
        out = {name: p.item() for name, p in model.named_parameters()}
        optimum = poly3_optimum(*self.data)
        with torch.no_grad():
            u = model.c + model.d * self.data[0]
            got, want = model.legendre_p3(u), legendre_p3_reference(u)
        if optimum is not None and bool(((got - want).abs() <= 1e-5 * want.abs().max()).all()):
            x, y = (t.double() for t in self.data)
            params = {name: p.detach().double() for name, p in model.named_parameters()}
            with torch.no_grad():
                loss = (torch.func.functional_call(model, params, (x,)) - y).square().sum()
            out["optimum_loss"] = optimum["loss"]
            out["rel_gap"] = (loss.item() - optimum["loss"]) / optimum["loss"]
        return out

    def describe(self, model: Poly3) -> str:
        """The fitted formula, y = a + b * P3(c + d x) with the numbers."""
        return model.formula()

    def figure(self, model: Poly3, step: int) -> Figure:
        """sin(x) and the fit, the formula in the title."""
        return line_figure(model, self.data, f"step {step}: {model.formula(digits=4)}",
                           "target sin(x)")
