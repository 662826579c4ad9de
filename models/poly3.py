"""The tutorial's model y = a + b * P3(c + d x) with four scalar parameters."""

from __future__ import annotations

import torch
from torch import nn

from .ops import legendre_p3


class Poly3(nn.Module):
    """y = a + b * P3(c + d x), P3 the Legendre polynomial of degree 3 (custom op or its twin)."""

    def __init__(
        self,
        a: float = 0.0,
        b: float = -1.0,
        c: float = 0.0,
        d: float = 0.3,
        impl: str = "custom",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.impl = impl
        factory = {"device": device, "dtype": dtype}
        self.a = nn.Parameter(torch.tensor(a, **factory))
        self.b = nn.Parameter(torch.tensor(b, **factory))
        self.c = nn.Parameter(torch.tensor(c, **factory))
        self.d = nn.Parameter(torch.tensor(d, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """a + b * P3(c + d x), elementwise."""
        return self.a + self.b * legendre_p3(self.c + self.d * x, self.impl)

    def formula(self, digits: int = 5) -> str:
        """The current fit as text, e.g. 'y = 0.0 + -2.2085 * P3(0.0 + 0.25549 x)'."""
        a, b, c, d = (f"{p.item():.{digits}g}" for p in (self.a, self.b, self.c, self.d))
        return f"y = {a} + {b} * P3({c} + {d} x)"

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}"
