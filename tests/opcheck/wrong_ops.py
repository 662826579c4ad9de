"""More deliberately wrong, limited or hostile ops for the card's and check_op's tests
(`tests.opcheck.wrong_ops:…`): each breaks one condition the models call the op under."""

import sys
import time

import torch
import torch.nn.functional as F


class ReLUWrongAtZero(torch.autograd.Function):
    """A relu whose gradient at x = 0 is 1 (mask x >= 0), where torch.relu's is 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x >= 0)


def relu_nan_to_zero(x):
    """A relu that maps NaN to 0 (torch.relu keeps it NaN)."""
    return torch.where(x > 0, x, 0)


class ReLUInPlace(torch.autograd.Function):
    """A relu that clamps its input in place without mark_dirty."""

    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=0)
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class LinearNoWeightGrad(torch.autograd.Function):
    """A linear whose backward returns None for the weight."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x @ weight.T + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, None, grad.reshape(-1, grad.shape[-1]).sum(0)


def conv_bn_ignores_training(x, w, g, b, rm, rv, training, momentum, eps, stride, padding,
                             dilation, groups):
    """Always normalizes with the batch's statistics, even in eval mode."""
    y = F.conv2d(x, w, None, stride, padding, dilation, groups)
    return F.batch_norm(y, rm, rv, g, b, True, momentum, eps)


def conv_bn_ints_only(x, w, g, b, rm, rv, training, momentum, eps, stride, padding, dilation,
                      groups):
    """Written for int stride/padding: sizes the output with int arithmetic."""
    out_h = (x.shape[2] + 2 * padding - dilation * (w.shape[2] - 1) - 1) // stride + 1
    y = F.conv2d(x, w, None, stride, padding, dilation, groups)
    assert y.shape[2] == out_h
    return F.batch_norm(y, rm, rv, g, b, training, momentum, eps)


def conv_bn_biased_var(x, w, g, b, rm, rv, training, momentum, eps, stride, padding, dilation,
                       groups):
    """Right output, but the running variance is updated 1% off."""
    out = F.batch_norm(F.conv2d(x, w, None, stride, padding, dilation, groups), rm, rv, g, b,
                       training, momentum, eps)
    if training:
        rv.mul_(1.01)
    return out


def conv_bn_tiny_stat_diff(x, w, g, b, rm, rv, training, momentum, eps, stride, padding,
                           dilation, groups):
    """Right, with a running mean 1e-14 away from F.batch_norm's (another summation order)."""
    out = F.batch_norm(F.conv2d(x, w, None, stride, padding, dilation, groups), rm, rv, g, b,
                       training, momentum, eps)
    if training:
        rm.add_(1e-14)
    return out


class P3SavesIntermediate(torch.autograd.Function):
    """Right first derivative, but backward uses x² computed in forward: a constant to double
    backward, so the second derivative comes out wrong."""

    @staticmethod
    def forward(ctx, x):
        x2 = x * x
        ctx.save_for_backward(x2)
        return 0.5 * (5 * x2 * x - 3 * x)

    @staticmethod
    def backward(ctx, grad):
        (x2,) = ctx.saved_tensors
        return grad * (7.5 * x2 - 1.5)


class P3JvpWrong(torch.autograd.Function):
    """A P3 whose jvp is off by a factor of 2."""

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
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (7.5 * x * x - 1.5)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 2 * t * (7.5 * x * x - 1.5)


def exits(x):
    """Ends the process."""
    sys.exit(3)


def hangs(x):
    """Takes far longer than any time limit of the tests."""
    time.sleep(20)
    return torch.relu(x)


class P3JvpZero(P3JvpWrong):
    """A P3 whose jvp returns zeros: forward AD that runs but is silently wrong."""

    @staticmethod
    def jvp(ctx, t):
        return torch.zeros_like(t)


def linear_2d_only(x, weight, bias):
    """A linear for 2-D input only (torch.addmm), where the models pass N-D input too."""
    return torch.addmm(bias, x, weight.T)


def hangs_in_float64(x):
    """Right in float32 (the pre-check's dtype); never returns in float64."""
    if x.dtype == torch.float64:
        time.sleep(20)
    return torch.relu(x)
