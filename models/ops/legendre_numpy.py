"""P3 computed in NumPy: the library's example of a backward that autograd cannot see through.

Forward and backward leave torch for NumPy (on the CPU), so autograd records nothing inside the
backward. A double backward would silently see a constant; `once_differentiable` makes it
raise instead. `legendre_p3` is the double-differentiable version of the same op.

No `import numpy` here: the arrays come from `Tensor.numpy()` and go back by
`torch.from_numpy`, so NumPy (installed with matplotlib) is needed only when the op runs.
"""

from __future__ import annotations

import torch

from ._checks import check_float_tensor, check_impl
from ._function import Function, once_differentiable
from .legendre import legendre_p3_builtin

OP = "legendre_p3_numpy"


def _to_numpy(t: torch.Tensor):  # -> numpy.ndarray
    # force=True: detach, move to the CPU and resolve conj/neg views, copying only if needed.
    # NumPy has no bfloat16: computed in float32, rounded back once (as accurate or more).
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy(force=True)


def _from_numpy(a, like: torch.Tensor) -> torch.Tensor:
    # as_tensor, not from_numpy: NumPy arithmetic on a 0-d array gives a NumPy scalar.
    return torch.as_tensor(a).to(like.device, like.dtype)


class LegendreP3NumPy(Function):
    """P3 with forward and backward in NumPy; the backward is marked once_differentiable."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        xn = _to_numpy(x)
        out = xn * xn
        out *= 2.5
        out -= 1.5
        out *= xn  # x·(2.5x² − 1.5): the same roundings as legendre_p3's kernels
        return _from_numpy(out, x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        xn = _to_numpy(x)
        dp3 = xn * xn
        dp3 *= 7.5
        dp3 -= 1.5
        dp3 *= _to_numpy(grad)
        return _from_numpy(dp3, grad)


def legendre_p3_numpy(x: torch.Tensor, impl: str = "custom") -> torch.Tensor:
    """P3(x) elementwise through NumPy (once differentiable); impl='builtin' is the eager
    expression."""
    check_float_tensor(OP, "x", x)
    if impl != "custom":
        check_impl(OP, impl)
        return legendre_p3_builtin(x)
    if torch._C._functorch.is_functorch_wrapped_tensor(x):
        raise TypeError(
            f"{OP}: torch.func transforms (vmap, grad, jacrev, ...) cannot see into NumPy; "
            "use legendre_p3, which supports them"
        )
    return LegendreP3NumPy.apply(x)
