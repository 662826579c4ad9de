"""The exact least-squares optimum of a + b·P3(c + d·x) against sin(x), by linear algebra.

a + b·P3(c + d·x) is a cubic in x, and every cubic p0 + p1·x + p2·x² + p3·x³ with p3 ≠ 0 and
p2² > 3·p1·p3 is one of them (solve p3 = 2.5bd³, p2 = 7.5bcd², p1 = bd(7.5c² − 1.5),
p0 = a + b(2.5c³ − 1.5c) for d², then c, b, a). So the model's global minimum is the linear
least-squares cubic fit whenever that cubic satisfies the condition (sin on a symmetric grid
does: p2 = 0, p1 > 0 > p3): no iteration, no starting point, and a certificate that no better
local minimum exists. The mirror solution (−b, −d) has the same loss; d > 0 is returned, the
branch the tutorial's start (d = 0.3) converges to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Poly3Optimum:
    """The optimal parameters and the sum of squared errors there (float64 values)."""

    a: float
    b: float
    c: float
    d: float
    loss: float

    def params(self) -> dict[str, float]:
        """The parameters as a dict a, b, c, d."""
        return {"a": self.a, "b": self.b, "c": self.c, "d": self.d}


def poly3_data(
    dtype: torch.dtype = torch.float64, n: int = 2000, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The tutorial's data: x = linspace(−π, π, n), y = sin(x), in `dtype`."""
    x = torch.linspace(-math.pi, math.pi, n, dtype=dtype, device=device)
    return x, torch.sin(x)


def cubic_to_poly3(p0: float, p1: float, p2: float, p3: float) -> tuple[float, ...]:
    """(a, b, c, d) with d > 0 such that a + b·P3(c + d·x) = p0 + p1·x + p2·x² + p3·x³."""
    disc = p2 * p2 / (3 * p3 * p3) - p1 / p3 if p3 != 0 else 0.0
    if disc <= 0:
        raise ValueError(
            f"the cubic {p0} + {p1}x + {p2}x² + {p3}x³ is not of the form a + b·P3(c + d·x) "
            "(needs p3 ≠ 0 and p2² > 3·p1·p3)"
        )
    d = math.sqrt(0.6 / disc)
    c = p2 * d / (3 * p3)
    b = p3 / (2.5 * d**3)
    a = p0 - b * (2.5 * c**3 - 1.5 * c)
    return a, b, c, d


def exact_poly3_optimum(dtype: torch.dtype = torch.float64, n: int = 2000) -> Poly3Optimum:
    """The global least-squares optimum of a + b·P3(c + d·x) on the tutorial data in `dtype`.

    The data is built in `dtype` (the float32 grid and sin values differ from float64 ones by
    rounding, so each dtype has its own optimum); everything after that is float64 on the CPU.
    """
    x, y = (t.double() for t in poly3_data(dtype, n, device="cpu"))
    # Basis in t = x/π keeps the normal equations well conditioned; rescaled afterwards.
    t = x / math.pi
    basis = torch.stack([torch.ones_like(t), t, t**2, t**3], dim=1)
    q = torch.linalg.lstsq(basis, y.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    a, b, c, d = cubic_to_poly3(*(float(q[k]) / math.pi**k for k in range(4)))
    u = c + d * x
    residuals = a + b * 0.5 * (5 * u**3 - 3 * u) - y
    return Poly3Optimum(a, b, c, d, float(residuals.square().sum()))
