"""The exact least-squares optimum of a + b·P3(c + d·x), by linear algebra.

a + b·P3(c + d·x) is a cubic in x, and every cubic p0 + p1·x + p2·x² + p3·x³ with p3 ≠ 0 and
p2² > 3·p1·p3 is one of them (solve p3 = 2.5bd³, p2 = 7.5bcd², p1 = bd(7.5c² − 1.5),
p0 = a + b(2.5c³ − 1.5c) for d², then c, b, a). So the model's global minimum is the linear
least-squares cubic whenever that cubic meets the condition (sin on a symmetric grid does:
p2 = 0, p1 > 0 > p3): no iteration, no starting point, and no better local minimum. Of the two
mirror solutions (b, d) and (−b, −d) the one with d > 0 is returned, the tutorial's branch.
"""

import math

import torch

# On the tutorial's float64 data (2000 points of sin on [-π, π]).
TUTORIAL_OPTIMUM_LOSS = 8.81716541000702


def cubic_to_poly3(p0: float, p1: float, p2: float, p3: float) -> tuple[float, ...] | None:
    """(a, b, c, d), d > 0, with a + b·P3(c + d·x) = p0 + p1·x + p2·x² + p3·x³; None if none."""
    disc = p2 * p2 / (3 * p3 * p3) - p1 / p3 if p3 != 0 else 0.0
    if disc <= 0:
        return None
    d = math.sqrt(0.6 / disc)
    c = p2 * d / (3 * p3)
    b = p3 / (2.5 * d**3)
    return p0 - b * (2.5 * c**3 - 1.5 * c), b, c, d


def poly3_optimum(x: torch.Tensor, y: torch.Tensor) -> dict[str, float] | None:
    """The optimal a, b, c, d for the data (x, y) and the sum of squared errors there, computed in
    float64 from the data as given; None where the best cubic is not of the model's form."""
    x, y = x.detach().double().cpu(), y.detach().double().cpu()
    scale = float(x.abs().max()) or 1.0  # a basis in x/scale keeps the normal equations sane
    t = x / scale
    basis = torch.stack([torch.ones_like(t), t, t**2, t**3], dim=1)
    q = torch.linalg.lstsq(basis, y.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    found = cubic_to_poly3(*(float(q[k]) / scale**k for k in range(4)))
    if found is None:
        return None
    a, b, c, d = found
    u = c + d * x
    loss = float((a + b * 0.5 * (5 * u**3 - 3 * u) - y).square().sum())
    return {"a": a, "b": b, "c": c, "d": d, "loss": loss}
