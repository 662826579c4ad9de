"""The tutorial's model y = a + b * P3(c + d x) with four scalar parameters."""

import torch
from torch import nn

from .layers import Op, op_name
from .ops import legendre_p3 as _legendre_p3
from .ops import legendre_p3_reference, unwrap

# The tutorial's starting point: y = -P3(0.3 x).
TUTORIAL_START = {"a": 0.0, "b": -1.0, "c": 0.0, "d": 0.3}


def short_name(op: Op) -> str:
    """P3 for ours and its twin; else the op's own name (a Function's class, a partial's fn)."""
    if op in (_legendre_p3, legendre_p3_reference):
        return "P3"
    named = unwrap(op)[0]
    return getattr(named, "__name__", type(named).__name__)


class Poly3(nn.Module):
    """y = a + b * P3(c + d x), P3 computed by `legendre_p3` (ours by default)."""

    def __init__(self, a: float = TUTORIAL_START["a"], b: float = TUTORIAL_START["b"],
                 c: float = TUTORIAL_START["c"], d: float = TUTORIAL_START["d"], *,
                 legendre_p3: Op = _legendre_p3, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.legendre_p3 = legendre_p3
        factory = {"device": device, "dtype": dtype}
        self.a = nn.Parameter(torch.tensor(a, **factory))
        self.b = nn.Parameter(torch.tensor(b, **factory))
        self.c = nn.Parameter(torch.tensor(c, **factory))
        self.d = nn.Parameter(torch.tensor(d, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """a + b * P3(c + d x), elementwise."""
        return self.a + self.b * self.legendre_p3(self.c + self.d * x)

    def formula(self, digits: int = 5) -> str:
        """The current fit as text, the op by its name: 'y = 0.0 + -2.2085 * P3(0.0 + 0.25549 x)'
        (ours or its twin), 'y = 0.0 + -1.0 * sinh(0.0 + 0.3 x)' (torch.sinh in the slot)."""
        values = [p.item() for p in (self.a, self.b, self.c, self.d)]
        # Below the dtype's rounding of the largest, a coefficient is 0 (its digits are the
        # CPU kernels' rounding: a = -3.3e-10 with AVX2, 4.7e-10 without): printed as 0.
        tiny = torch.finfo(self.a.dtype).eps * max(map(abs, values))
        a, b, c, d = (f"{0 if abs(v) < tiny else v:.{digits}g}" for v in values)
        return f"y = {a} + {b} * {short_name(self.legendre_p3)}({c} + {d} x)"

    def extra_repr(self) -> str:
        return f"legendre_p3={op_name(self.legendre_p3)}"
