"""y = x Wᵀ + b over any leading batch dims, as a custom autograd op."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._checks import check_float_tensor, check_impl, check_same_dtype_device
from ._function import compile_safe_apply


class LinearFn(torch.autograd.Function):
    """Linear map that saves only what the requested gradients need."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() == 2 and bias is not None:
            return torch.addmm(bias, x, weight.t())
        out = x.matmul(weight.t())
        return out if bias is None else out.add_(bias)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, weight, bias = inputs
        needs_x, needs_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        # grad_x needs only W and grad_W needs only x: keep nothing the backward won't read.
        ctx.save_for_backward(x if needs_w else None, weight if needs_x else None)
        ctx.save_for_forward(x, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = grad.matmul(weight)
        if ctx.needs_input_grad[1] or (ctx.has_bias and ctx.needs_input_grad[2]):
            grad_2d = _rows(grad)
            if ctx.needs_input_grad[1]:
                grad_w = grad_2d.t().mm(_rows(x))
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_b = grad_2d.sum(0)
        return grad_x, grad_w, grad_b

    @staticmethod
    def jvp(ctx, x_t, weight_t, bias_t):
        x, weight = ctx.saved_tensors
        out_t = torch.zeros((), dtype=x.dtype, device=x.device)
        if x_t is not None:
            out_t = out_t + x_t.matmul(weight.t())
        if weight_t is not None:
            out_t = out_t + x.matmul(weight_t.t())
        if bias_t is not None:
            out_t = out_t + bias_t
        return out_t.expand(*x.shape[:-1], weight.shape[0])


_apply = compile_safe_apply(LinearFn)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t as a 2-D (rows, last dim) matrix; explicit rows: reshape(-1, 0) can't infer them."""
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def linear_builtin(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """torch.nn.functional.linear, the built-in twin."""
    return F.linear(x, weight, bias)


def _check_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    check_float_tensor("linear", "x", x)
    check_float_tensor("linear", "weight", weight)
    if bias is not None:
        check_float_tensor("linear", "bias", bias)
    check_same_dtype_device("linear", "x", x, weight=weight, bias=bias)
    if weight.dim() != 2:
        raise ValueError(
            "linear: weight must be 2-D (out_features, in_features), "
            f"got shape {tuple(weight.shape)}"
        )
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"linear: x's last dim must equal weight's in_features={weight.shape[1]}, "
            f"got x of shape {tuple(x.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(
            f"linear: bias must have shape ({weight.shape[0]},) to match weight's out_features, "
            f"got {tuple(bias.shape)}"
        )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, impl: str = "custom"
) -> torch.Tensor:
    """x @ weight.T + bias over any leading dims, like F.linear; impl='builtin' is F.linear."""
    _check_linear(x, weight, bias)
    if impl == "custom":
        return _apply(x, weight, bias)
    check_impl("linear", impl)
    return F.linear(x, weight, bias)
