"""Two ReLUs with custom backward: `relu` saves its output, `relu_masked` a 1-byte mask.

`relu` alone saves as many bytes as torch.relu, but inside a model it usually adds none: the
layer after it (Linear, conv, max-pool) saves the same tensor, and a storage is kept once.
`relu_masked` pays off where nothing after it saves the output; elsewhere its mask comes on top.
"""

import torch

from ._function import compilable


class ReLUFn(torch.autograd.Function):
    """max(x, 0); saves its output, which backward thresholds exactly as torch.relu's does."""

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
        # torch.relu's own backward kernel: grad where out > 0, else +0.0 (also for inf/NaN
        # grads), and itself differentiable in grad for double backward.
        return torch.ops.aten.threshold_backward(grad, out, 0)

    # The derivative is a mask (a diagonal Jacobian): tangents pass where gradients pass.
    jvp = backward


class ReLUMaskedFn(ReLUFn):
    """ReLUFn's forward; saves `out != 0` as a 1-byte mask (¼ of float32's bytes) for backward."""

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        # out.bool() is out != 0, i.e. x > 0 (NaN included, as in torch.relu).
        mask = output.bool()
        ctx.save_for_backward(mask)
        ctx.save_for_forward(mask)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _masked(grad, ctx.saved_tensors[0])

    jvp = backward


def _masked(t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """t where mask else +0.0 (also where t is inf or NaN), differentiable in t."""
    # torch.relu's backward kernel on the mask as 0/1 floats; through int8 because bool ->
    # float has no vectorized CPU kernel (~6x slower), and torch.where on bool ~15x slower.
    return torch.ops.aten.threshold_backward(t, mask.view(torch.int8).to(t.dtype), 0)


_relu, _relu_masked = compilable(ReLUFn), compilable(ReLUMaskedFn)


def relu(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) elementwise, saving its output for backward; its twin is torch.relu."""
    return _relu(x)


def relu_masked(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) elementwise, saving a 1-byte mask for backward; its twin is torch.relu."""
    return _relu_masked(x)
