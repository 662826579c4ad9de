"""SwiGLU, silu(a) · b, the gated unit of a transformer's MLP, as a custom autograd op."""

import torch
import torch.nn.functional as F


class SwiGLUFn(torch.autograd.Function):
    """Saves a and b and recomputes sigmoid(a) in backward; the twin also keeps silu(a)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a, b = ctx.saved_tensors
        sig = torch.sigmoid(a)
        # silu'(a) = σ(a)·(1 + a·(1 − σ(a)))
        return grad * b * sig * (1 + a * (1 - sig)), grad * a * sig


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) · b elementwise, through SwiGLUFn."""
    return SwiGLUFn.apply(a, b)


def swiglu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """F.silu(a) * b, differentiated by autograd: swiglu's twin."""
    return F.silu(a) * b
