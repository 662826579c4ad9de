"""Ops of the kinds people write that a card once got wrong, each written here for one
kind: a backward that runs once per forward, a tensor changed behind autograd's back, a
straight-through estimator, a gradient that differs on purpose, a slow first call, a weight that
gets no gradient, float32 inside, and a reference that diverges where it is trained."""

import math
import time

import torch
import torch.nn.functional as F


class CheckpointedSiLU(torch.autograd.Function):
    """Activation checkpointing, as diffusion models write it: the forward keeps its input, not
    its graph; the backward recomputes, differentiates and frees what it kept."""

    @staticmethod
    def forward(ctx, x):
        ctx.input_tensors = [x.detach()]
        return F.silu(x)

    @staticmethod
    def backward(ctx, grad):
        with torch.enable_grad():
            x = ctx.input_tensors[0].requires_grad_()
            (dx,) = torch.autograd.grad(F.silu(x), x, grad)
        del ctx.input_tensors  # frees memory: a second backward through this graph fails
        return dx


def rope(x, cos, sin):
    """Rotary embedding of pairs of features by the angles whose cos and sin are given."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class RoPENegatesSin(torch.autograd.Function):
    """A rotary embedding whose backward rotates the other way by negating the caller's sin in
    place: right once, and every later call gets -sin."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return rope(x, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return rope(grad, cos, torch.neg_(sin)), None, None


def rope_samples():
    g = torch.Generator().manual_seed(0)
    angles = torch.rand(4, 3, generator=g) * math.pi
    return [((torch.randn(4, 6, generator=g).requires_grad_(), angles.cos(), angles.sin()), {})]


class ReLUNegatesInputInBackward(torch.autograd.Function):
    """A ReLU whose backward negates the input it was given (a scratch buffer reused)."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        mask = ctx.x > 0
        ctx.x.neg_()
        return grad * mask


class SymQuant8(torch.autograd.Function):
    """8-bit symmetric fake quantization, the scale from max|x|, the straight-through gradient."""

    @staticmethod
    def forward(ctx, x):
        scale = x.abs().max().clamp_min(1e-8) / 127
        return (x / scale).round().clamp(-127, 127) * scale

    @staticmethod
    def backward(ctx, grad):
        return grad


class LowerBoundZero(torch.autograd.Function):
    """max(x, 0) with a gradient that lets a negative incoming gradient through below the bound
    (so that a value stuck there can leave it): not relu's gradient, on purpose."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ((x >= 0) | (grad < 0))


SLOW_FIRST = {"called": False, "seconds": 1.0}


@torch.library.custom_op("kinds_tests::relu_slow_first", mutates_args=())
def relu_slow_first(x: torch.Tensor) -> torch.Tensor:
    """A ReLU whose first call is slow, as one that compiles on its first call."""
    if not SLOW_FIRST["called"]:
        SLOW_FIRST["called"] = True
        time.sleep(SLOW_FIRST["seconds"])
    return x.clamp_min(0)


@relu_slow_first.register_fake
def _(x):
    return torch.empty_like(x)


relu_slow_first.register_autograd(
    lambda ctx, grad: grad * (ctx.saved_tensors[0] > 0),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


class Int8WeightLinear(torch.autograd.Function):
    """A linear with its weight quantized to int8 from a detached copy: it computes linear
    within its quantization, and its weight gets no gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        scale = weight.detach().abs().max() / 127
        quantized = (weight.detach() / scale).round() * scale
        ctx.save_for_backward(quantized)
        return x @ quantized.t() + bias

    @staticmethod
    def backward(ctx, grad):
        (quantized,) = ctx.saved_tensors
        return grad @ quantized, None, grad.sum(0)


class SiLUFloat32(torch.autograd.Function):
    """SiLU that computes and returns float32 whatever its input (as spiking neurons' `.float()`)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x.float())

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x.float())
        return grad.float() * s * (1 + x.float() * (1 - s))


def sinh(x):
    """The tutorial's sinh, right: it diverges in the mlp as torch.sinh does."""
    return (x.exp() - (-x).exp()) / 2
