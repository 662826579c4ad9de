"""x³ with exact double backward: the derivative 3x² is an extra output (the MyCube pattern)."""

from __future__ import annotations

import torch

from .._checks import check_float_tensor, check_impl
from .._function import compile_safe_apply


class Cube(torch.autograd.Function):
    """Returns (x³, 3x²); backward uses the saved 3x² so autograd can differentiate it again."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dx = (x * x).mul_(3)
        result = x * x * x
        return result, dx

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        (x,) = inputs
        _, dx = output
        # dx is an output, so in a double backward its gradient flows back through
        # the graph of this Function again: that is what makes the second derivative exact.
        ctx.save_for_backward(x, dx)
        ctx.save_for_forward(x, dx)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad_result: torch.Tensor | None, grad_dx: torch.Tensor | None):
        x, dx = ctx.saved_tensors
        grad_x = None
        if grad_result is not None:
            grad_x = grad_result * dx
        if grad_dx is not None:
            term = grad_dx * 6 * x
            grad_x = term if grad_x is None else grad_x + term
        return grad_x

    @staticmethod
    def jvp(ctx, x_tangent: torch.Tensor):
        x, dx = ctx.saved_tensors
        return x_tangent * dx, x_tangent * 6 * x


_apply = compile_safe_apply(Cube)


def cube(x: torch.Tensor, impl: str = "custom") -> torch.Tensor:
    """x³ elementwise with exact higher derivatives; impl='builtin' is `x ** 3`."""
    check_float_tensor("cube", "x", x)
    if impl == "custom":
        result, _ = _apply(x)
        return result
    check_impl("cube", impl)
    return x**3
