"""x · c for a Python number c: an op with a non-tensor argument."""

import torch


class MulConstant(torch.autograd.Function):
    """x * c; c gets no gradient (backward returns None for it)."""

    @staticmethod
    def forward(x: torch.Tensor, constant: float) -> torch.Tensor:
        return x * constant

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.constant = inputs[1]  # a number, not a tensor: kept on ctx, not saved

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.constant, None


def mul_constant(x: torch.Tensor, c: float) -> torch.Tensor:
    """x * c for a real Python number c; its twin is `x * c`."""
    return MulConstant.apply(x, c)
