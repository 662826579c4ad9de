"""Swish, x·sigmoid(x), as a torch.autograd.Function: torch has it as F.silu.

Its report card against torch's own (from the repository root):

    PYTHONPATH=docs/examples python -m fitting.opcheck activation swish:Swish \
        --ref torch.nn.functional:silu
"""

import torch


class Swish(torch.autograd.Function):
    """x·sigmoid(x), saving x for backward; forward/setup_context, jvp and a vmap rule so the
    lm optimizer (jacfwd) can use it, and a backward of torch ops for double backward."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * s * (1 + x * (1 - s))

    @staticmethod
    def jvp(ctx, x_tangent):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return x_tangent * s * (1 + x * (1 - s))
