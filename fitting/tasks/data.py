"""Data made in-process: 1-D target functions and rasterized images of noisy P3 curves."""

from __future__ import annotations

import torch

from models.ops import legendre_p3_builtin

TARGETS = {
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "abs": torch.abs,
    "square": torch.square,
    "gauss": lambda x: torch.exp(-(x**2)),
}

# Ranges of the curve parameters (a, b, c, d) of the cnn images. d > 0 and |b| >= B_MIN make
# the map (a, b, c, d) -> curve one-to-one: P3 is odd, so (a, -b, -c, -d) draws the same curve,
# and b = 0 would leave c and d undetermined.
A_RANGE = (-0.5, 0.5)
B_MIN, B_MAX = 0.3, 1.0
C_RANGE = (-0.2, 0.2)
D_RANGE = (0.6, 1.0)
# The image spans x in [-1, 1] (columns) and y in [-Y_SPAN, Y_SPAN] (rows, top = +Y_SPAN).
Y_SPAN = 3.0
LINE_WIDTH = 1.0  # std of the line's Gaussian profile, in pixels


def target_function(name: str):
    """The mlp target y = f(x) named `name` (one of TARGETS)."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; choose one of {sorted(TARGETS)}") from None


def sample_curve_params(n: int, generator: torch.Generator) -> torch.Tensor:
    """n parameter vectors (a, b, c, d) drawn uniformly from the ranges above, shape (n, 4)."""
    u = torch.rand(n, 4, generator=generator, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0).double()
    a = A_RANGE[0] + (A_RANGE[1] - A_RANGE[0]) * u[:, 0]
    b = sign * (B_MIN + (B_MAX - B_MIN) * u[:, 1])
    c = C_RANGE[0] + (C_RANGE[1] - C_RANGE[0]) * u[:, 2]
    d = D_RANGE[0] + (D_RANGE[1] - D_RANGE[0]) * u[:, 3]
    return torch.stack([a, b, c, d], dim=1)


def curve_values(params: torch.Tensor, size: int) -> torch.Tensor:
    """y = a + b * P3(c + d x) at the `size` column centres x in [-1, 1], shape (n, size)."""
    x = torch.linspace(-1.0, 1.0, size, dtype=params.dtype, device=params.device)
    a, b, c, d = (params[:, i : i + 1] for i in range(4))
    return a + b * legendre_p3_builtin(c + d * x)


def y_to_row(y: torch.Tensor, size: int) -> torch.Tensor:
    """Fractional row index of the value y (row 0 at the top, +Y_SPAN)."""
    return (Y_SPAN - y) / (2 * Y_SPAN) * (size - 1)


def rasterize_curves(
    params: torch.Tensor, size: int, noise: float, generator: torch.Generator
) -> torch.Tensor:
    """Images (n, 1, size, size) of the curves drawn as soft lines, plus Gaussian pixel noise."""
    rows = y_to_row(curve_values(params, size), size)  # (n, size): one row value per column
    grid = torch.arange(size, dtype=params.dtype).view(1, size, 1)
    images = torch.exp(-0.5 * ((grid - rows.unsqueeze(1)) / LINE_WIDTH) ** 2)
    images = images + noise * torch.randn(images.shape, generator=generator, dtype=params.dtype)
    return images.unsqueeze(1)


def param_scale() -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and half-range of (a, b, c, d) so that standardized targets lie in about [-1, 1]."""
    lo = torch.tensor([A_RANGE[0], -B_MAX, C_RANGE[0], D_RANGE[0]], dtype=torch.float64)
    hi = torch.tensor([A_RANGE[1], B_MAX, C_RANGE[1], D_RANGE[1]], dtype=torch.float64)
    return (hi + lo) / 2, (hi - lo) / 2
