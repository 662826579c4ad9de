"""A user's RMSNorm, written as the tutorial writes an op, to put in the `norm` slot:

    python -m fitting.opcheck norm tests.helpers.my_rms_norm:MyRMSNorm
    python train.py task=forecast ops.norm=tests.helpers.my_rms_norm:MyRMSNorm
"""

import torch


class MyRMSNorm(torch.autograd.Function):
    """x / sqrt(mean(x²) + eps) · weight over the last dim. Saves x and weight only and
    recomputes 1/rms in backward, out of place: its backward is itself differentiable."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        inv = (x.pow(2).mean(-1, keepdim=True) + ctx.eps).rsqrt()
        x_hat, g = x * inv, grad * weight
        grad_x = inv * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
        return grad_x, (grad * x_hat).sum_to_size(weight.shape), None
