"""RMSNorm, y = x / rms(x) · weight over the last dim, as a custom autograd op."""

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


class RMSNormFn(torch.autograd.Function):
    """Saves x and one 1/rms per row: what backward needs, and no normalized copy of x. The
    saved 1/rms is a constant to autograd, so backward is differentiable once only."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        inv_rms = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, inv_rms)
        return x * inv_rms * weight

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, weight, inv_rms = ctx.saved_tensors
        x_hat, grad_hat = x * inv_rms, grad * weight
        # d(x·r)/dx with r = 1/rms(x): r·(g − x̂·mean(g·x̂)), the projection rms makes.
        grad_x = inv_rms * (grad_hat - x_hat * (grad_hat * x_hat).mean(-1, keepdim=True))
        grad_w = (grad * x_hat).sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(mean(x², last dim) + eps) · weight, through RMSNormFn."""
    return RMSNormFn.apply(x, weight, eps)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """F.rms_norm over the last dim: rms_norm's twin."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
