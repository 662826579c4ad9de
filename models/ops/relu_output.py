"""ReLU that saves its output for backward: the tensor the next layer saves anyway."""

from __future__ import annotations

import torch

from ._checks import check_float_tensor, check_impl
from ._function import compile_safe_apply


class ReLUOutputFn(torch.autograd.Function):
    """max(x, 0); saves its output, which backward thresholds exactly as F.relu's does.

    Alone it saves as many bytes as F.relu. Inside a model it usually adds none: the layer
    after it (Linear, conv, max-pool) saves the same tensor, and a storage is kept once.
    `relu_masked` saves a 1-byte mask instead, which comes on top of that shared output.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        # F.relu's own backward kernel: grad where out > 0, else +0.0 (also for inf/NaN grads),
        # and itself differentiable in grad for double backward.
        return torch.ops.aten.threshold_backward(grad, out, 0)

    @staticmethod
    def jvp(ctx, x_tangent: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(x_tangent, out, 0)


_apply = compile_safe_apply(ReLUOutputFn)


def relu(x: torch.Tensor, impl: str = "custom") -> torch.Tensor:
    """max(x, 0) elementwise, saving its output for backward; impl='builtin' is torch.relu."""
    check_float_tensor("relu", "x", x)
    if impl == "custom":
        return _apply(x)
    check_impl("relu", impl)
    return torch.relu(x)
