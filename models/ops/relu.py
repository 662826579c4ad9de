"""ReLU that saves a 1-byte mask for backward (`relu_masked`): for places where nothing after
it saves the output, since a model keeps that shared output anyway (see relu_output.py)."""

from __future__ import annotations

import torch

from ._checks import check_float_tensor, check_impl
from ._function import compile_safe_apply, is_transform_wrapper


class ReLUFn(torch.autograd.Function):
    """max(x, 0); saves `out > 0` as a 1-byte mask (¼ of float32's bytes) for backward."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        # out.bool() is out != 0, i.e. x > 0 (NaN passes, as in F.relu); measured ~6× cheaper
        # than computing x > 0. Stored as int8 0/-1 (all ones), so backward's widening to the
        # grad's integer width sign-extends straight into an AND mask: one pass fewer on the
        # wide buffer than widening 0/1 and negating there.
        mask = output.bool().view(torch.int8).neg_()
        ctx.save_for_backward(mask)
        ctx.save_for_forward(mask)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (mask,) = ctx.saved_tensors
        return _apply_mask(grad, mask)

    @staticmethod
    def jvp(ctx, x_tangent: torch.Tensor) -> torch.Tensor:
        (mask,) = ctx.saved_tensors
        return torch.where(mask != 0, x_tangent, 0)


_apply = compile_safe_apply(ReLUFn)
# Same-width integer dtype of each float dtype, for masking by bitwise AND.
_BITS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def _apply_mask(t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """t where mask (int8 0/-1) else +0.0, exactly like F.relu's backward (a NaN or inf where
    the mask is off still gives 0, which multiplying by the mask would turn into NaN)."""
    if (
        torch.compiler.is_compiling()
        or (torch.is_grad_enabled() and t.requires_grad)
        or is_transform_wrapper(t)
    ):
        # Traced, create_graph=True or vmapped: a differentiable, batchable op. (where is
        # ~20x slower than the path below on CPU, but these modes are not the hot path.)
        return torch.where(mask != 0, t, 0)
    # int8 -> int is a vectorized conversion (bool -> float is not: ~8x slower here); -1 is all
    # ones, so AND keeps t's bits where the mask is on and gives +0.0 elsewhere.
    bits = _BITS[t.dtype]
    return mask.to(bits).bitwise_and_(t.view(bits)).view(t.dtype)


def relu_masked(x: torch.Tensor, impl: str = "custom") -> torch.Tensor:
    """max(x, 0) elementwise, saving a 1-byte mask; impl='builtin' is torch.relu."""
    check_float_tensor("relu_masked", "x", x)
    if impl == "custom":
        return _apply(x)
    check_impl("relu_masked", impl)
    return torch.relu(x)
