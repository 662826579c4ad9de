"""Conv2d (no bias) then BatchNorm2d as one autograd op that keeps only its input for backward."""

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules.utils import _pair

from ._function import compilable
from .conv_bn_backward import (
    batch_norm_backward_into,
    batch_slices,
    conv_backward_in_slices,
    conv_in_slices,
)


class FusedConvBN2dFunction(torch.autograd.Function):
    """Training-mode conv → batch norm that recomputes the conv in backward instead of saving it.

    Saves x, the weights and the per-channel batch mean and 1/std, not the conv output the pair
    keeps. It runs the pair's aten kernels, so it matches the pair bit for bit on CPU (gradients
    too, up to ONE_CALL_BYTES of conv output; beyond, a sliced backward matches to rounding).
    Its backward is differentiable. `conv` is torch.convolution's trailing arguments (stride,
    padding, dilation, False, (0, 0), groups); running stats are updated in place.
    """

    @staticmethod
    def forward(ctx, x, weight, bn_weight, bn_bias, running_mean, running_var, momentum, eps, conv):
        # forward(ctx, ...) rather than setup_context: Function.apply then skips binding the
        # arguments with inspect.signature, a third of this op's Python overhead per call.
        y = torch.convolution(x, weight, None, *conv)
        out, save_mean, save_invstd = torch.native_batch_norm(
            y, bn_weight, bn_bias, running_mean, running_var, True, momentum, eps)
        ctx.mark_non_differentiable(save_mean, save_invstd)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, weight, bn_weight, save_mean, save_invstd)
        ctx.eps, ctx.conv = eps, conv
        return out, save_mean, save_invstd

    @staticmethod
    def backward(ctx, grad_out, _grad_mean, _grad_invstd):
        need_x, need_w, need_g, need_b = ctx.needs_input_grad[:4]
        if grad_out is None:
            return (None,) * 9
        if not (need_x or need_w or need_g):
            # d(out)/d(bias) is 1: no conv recompute for the bias gradient alone.
            return None, None, None, grad_out.sum((0, 2, 3)), *(None,) * 5
        x, weight, bn_weight, save_mean, save_invstd = ctx.saved_tensors
        # The sliced, in-place pieces cannot serve double backward (not differentiable) or
        # the half precisions (aten computes those in float); under torch.compile, the
        # compiler plans the memory (traced, they cost 3x the time and 1.6x the peak).
        sliced = (not torch.is_grad_enabled() and x.dtype in (torch.float32, torch.float64)
                  and not torch.compiler.is_compiling())
        y = conv_in_slices(x, weight, ctx.conv, sliced)
        grad_out = _strided_as(grad_out, y.stride())
        if not sliced or len(batch_slices(y)) == 1:
            mask = [need_x or need_w, need_g, need_b]
            grad_y, grad_g, grad_b = torch.ops.aten.native_batch_norm_backward(
                grad_out, y, bn_weight, None, None, save_mean, save_invstd, True, ctx.eps, mask)
            del y  # free the recomputed activation before the conv backward allocates
        else:
            grad_y, grad_g, grad_b = batch_norm_backward_into(y, grad_out, bn_weight, save_mean,
                                                              save_invstd)
        grad_x = grad_w = None
        if need_x or need_w:
            grad_x, grad_w = conv_backward_in_slices(grad_y, x, weight, ctx.conv, need_x, need_w,
                                                     sliced)
        grad_g, grad_b = (grad_g if need_g else None), (grad_b if need_b else None)
        return grad_x, grad_w, grad_g, grad_b, *(None,) * 5


_apply = compilable(FusedConvBN2dFunction)
_NHWC = (1, 3, 2, 0)  # channels_last's dims, innermost first
Pair = int | tuple[int, int]  # F.conv2d's stride, padding, dilation


def _dense(t: torch.Tensor | None) -> torch.Tensor | None:
    """t if it has the strides torch.empty gives a contiguous or channels_last tensor of its
    shape, else a copy that has them: aten's CPU conv and batch-norm kernels misread some
    others (strided per-channel tensors, odd strides on size-1 dims), silently."""
    if t is None or 1 not in t.shape and (
            t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)):
        return t  # no size-1 dims: these strides are the only ones of their format
    orders = [range(t.dim() - 1, -1, -1), *([_NHWC] if t.dim() == 4 else [])]
    if any(t.stride() == _strides(t.shape, order) for order in orders):
        return t
    nhwc = t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)
    return t.clone(memory_format=torch.channels_last if nhwc else torch.contiguous_format)


def _strides(shape: torch.Size, order) -> tuple[int, ...]:
    """The strides of a dense tensor of `shape` whose dims, innermost first, are `order`."""
    strides, step = [0] * len(shape), 1
    for dim in order:
        strides[dim], step = step, step * max(shape[dim], 1)
    return tuple(strides)


def _strided_as(grad: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """grad with `strides` (its batch-norm output's): aten's CPU batch-norm backward reads its
    grad_out as if laid out as its input, and gets wrong gradients from another layout."""
    if grad.stride() == strides:
        return grad
    return grad.new_empty_strided(grad.shape, strides).copy_(grad)


def conv_bn_reference(x: Tensor, weight: Tensor, bn_weight: Tensor | None = None,
                      bn_bias: Tensor | None = None, running_mean: Tensor | None = None,
                      running_var: Tensor | None = None, training: bool = False,
                      momentum: float = 0.1, eps: float = 1e-5, stride: Pair = 1,
                      padding: Pair | str = 0, dilation: Pair = 1, groups: int = 1) -> Tensor:
    """F.conv2d (no bias) then F.batch_norm: fused_conv_bn2d's twin, with its signature."""
    y = F.conv2d(x, weight, None, stride, padding, dilation, groups)
    return F.batch_norm(y, running_mean, running_var, bn_weight, bn_bias, training, momentum, eps)


def fused_conv_bn2d(x: Tensor, weight: Tensor, bn_weight: Tensor | None = None,
                    bn_bias: Tensor | None = None, running_mean: Tensor | None = None,
                    running_var: Tensor | None = None, training: bool = False,
                    momentum: float = 0.1, eps: float = 1e-5, stride: Pair = 1,
                    padding: Pair | str = 0, dilation: Pair = 1, groups: int = 1) -> Tensor:
    """batch_norm(conv2d(x, weight), ...) with F.conv2d/F.batch_norm's arguments and results;
    in training, one op that recomputes the conv in backward instead of saving its output."""
    x, weight, bn_weight, bn_bias = (_dense(t) for t in (x, weight, bn_weight, bn_bias))
    if not training:  # eval reads the running stats and never writes them: dense copies too
        running_mean, running_var = _dense(running_mean), _dense(running_var)
    args = (x, weight, bn_weight, bn_bias, running_mean, running_var, training, momentum, eps)
    strided_stats = any(t is not None and not t.is_contiguous() for t in args[4:6])
    strided_same = padding == "same" and _pair(stride) != (1, 1)
    if not training or x.numel() == 0 or strided_stats or strided_same:
        # Eval mode saves no conv output either way (BN is a fixed per-channel affine map);
        # the rest are edge cases the pair handles (or refuses) in its own words.
        out = conv_bn_reference(*args, stride, padding, dilation, groups)
        if out.requires_grad and not torch.compiler.is_compiling():
            strides = out.stride()
            out.register_hook(lambda grad: _strided_as(grad, strides))
        return out
    stride, dilation = _pair(stride), _pair(dilation)
    if isinstance(padding, str):
        # F.conv2d's 'valid' and 'same' (whose odd total padding goes on the far side).
        total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:], strict=True)]
        total = [0, 0] if padding == "valid" else total
        x = F.pad(x, (0, total[1] % 2, 0, total[0] % 2))
        padding = [t // 2 for t in total]
    out_hw = [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, p, d, k, s in zip(
        x.shape[2:], _pair(padding), dilation, weight.shape[2:], stride, strict=True)]
    if x.shape[0] * out_hw[0] * out_hw[1] == 1:
        # native_batch_norm would divide by zero; F.batch_norm refuses it with this message.
        raise ValueError("Expected more than 1 value per channel when training, got input "
                         f"size {[x.shape[0], weight.shape[0], *out_hw]}")
    conv = (stride, _pair(padding), dilation, False, (0, 0), groups)
    return _apply(x, weight, bn_weight, bn_bias, running_mean, running_var, float(momentum),
                  float(eps), conv)[0]
