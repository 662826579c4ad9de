"""The two custom ops of the PyTorch tutorial "Learning PyTorch with Examples", with the
tutorial's code (forward(ctx, ...), no jvp, MyReLU's gradient 1 at x = 0).

Their report cards (from the repository root):

    PYTHONPATH=docs/examples python -m fitting.opcheck activation tutorial_ops:MyReLU
    PYTHONPATH=docs/examples python -m fitting.opcheck legendre_p3 tutorial_ops:LegendrePolynomial3
"""

import torch


class MyReLU(torch.autograd.Function):
    """max(x, 0); its backward passes the gradient wherever x >= 0 (x = 0 included)."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


class LegendrePolynomial3(torch.autograd.Function):
    """P3(x) = (5x³ − 3x) / 2, and P3'(x) = 1.5 (5x² − 1) in backward."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input**3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input**2 - 1)
