"""A user's RMSNorm, written as the tutorial writes an op, to put in the `norm` slot:

    python -m fitting.opcheck norm tests.helpers.my_rms_norm:MyRMSNorm
    python train.py task=forecast ops.norm=tests.helpers.my_rms_norm:MyRMSNorm
"""

import torch


class MyRMSNorm(torch.autograd.Function):
    """x / sqrt(mean(x²) + eps) · weight over the last dim; saves x̂ and 1/rms."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        inv = (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
        x_hat = x * inv
        ctx.save_for_backward(x_hat, weight, inv)
        return x_hat * weight

    @staticmethod
    def backward(ctx, grad):
        x_hat, weight, inv = ctx.saved_tensors
        g = grad * weight
        grad_x = inv * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
        return grad_x, (grad * x_hat).sum_to_size(weight.shape), None
