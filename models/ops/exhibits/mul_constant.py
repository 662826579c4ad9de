"""x · c for a Python number c: an op with a non-tensor argument."""

from __future__ import annotations

import numbers

import torch

from .._checks import check_float_tensor, check_impl
from .._function import compile_safe_apply


class MulConstant(torch.autograd.Function):
    """x * c; c gets no gradient, and a missing incoming gradient stays missing."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, constant: float) -> torch.Tensor:
        return x * constant

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.constant = inputs[1]
        # An unused output then reaches backward as None instead of a zero-filled tensor.
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad: torch.Tensor | None):
        if grad is None:
            return None, None
        return grad * ctx.constant, None

    @staticmethod
    def jvp(ctx, x_tangent: torch.Tensor, _constant_tangent):
        return x_tangent * ctx.constant


_apply = compile_safe_apply(MulConstant)


def mul_constant(x: torch.Tensor, c: float, impl: str = "custom") -> torch.Tensor:
    """x * c for a real Python number c; impl='builtin' is plain `x * c`."""
    check_float_tensor("mul_constant", "x", x)
    if isinstance(c, bool) or not isinstance(c, numbers.Real):
        raise TypeError(
            f"mul_constant: c must be a real Python number (int or float), got {type(c).__name__}; "
            "for a tensor factor use torch.mul"
        )
    try:
        # One value for both impls: a Fraction or a big int becomes the float torch would use.
        c = float(c)
    except OverflowError:
        raise ValueError(
            f"mul_constant: c has {len(str(abs(c)))} digits, beyond the float range"
        ) from None
    if impl == "custom":
        return _apply(x, c)
    check_impl("mul_constant", impl)
    return x * c
