"""Deliberately wrong or limited user ops for the report card's tests (`tests.opcheck.bad_ops:…`)."""

import torch
from torch.autograd.function import once_differentiable

from models.ops.exhibits import once_differentiable as models_once_differentiable


class ReLUBackwardTimesTwo(torch.autograd.Function):
    """A correct forward whose backward is off by a factor of 2."""

    @staticmethod
    def forward(x):
        return x.clamp_min(0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return 2 * grad * (out > 0)


def relu_forward_off(x):
    """A forward off by a little (1e-4 relative); its gradient is off by as much."""
    return torch.relu(x) * (1 + 1e-4)


class ReLUNoJvp(torch.autograd.Function):
    """Old-style (forward takes ctx), no jvp: right for backward, no forward AD, no vmap."""

    @staticmethod
    def forward(ctx, x):
        out = x.clamp_min(0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class P3NoJvp(torch.autograd.Function):
    """P3 without a jvp or vmap support: the lm optimizer cannot use it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * (5 * x**3 - 3 * x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (7.5 * x * x - 1.5)


class ReLUOnce(torch.autograd.Function):
    """A correct relu whose backward is torch's once_differentiable: a double backward that asks
    for the input's or the incoming gradient's derivative gets None, silently (torch.func's
    jacrev(grad) would see zeros)."""

    @staticmethod
    def forward(x):
        return x.clamp_min(0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class ReLUOnceRaises(ReLUOnce):
    """The same relu with the op library's once_differentiable: double backward raises."""

    @staticmethod
    @models_once_differentiable
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class P3Once(torch.autograd.Function):
    """A correct P3 (with jvp and vmap) whose backward is torch's once_differentiable."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return 0.5 * (5 * x**3 - 3 * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (7.5 * x * x - 1.5)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * (7.5 * x * x - 1.5)
