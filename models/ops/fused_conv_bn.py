"""Conv2d (no bias) then BatchNorm2d as one autograd op that keeps only its input for backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_impl
from ._function import compile_safe_apply
from ._memory_format import suggest_memory_format
from .conv_bn_backward import (
    batch_norm_backward_into,
    batch_slices,
    conv_backward_in_slices,
    conv_in_slices,
)
from .conv_bn_checks import OP, check_conv_bn, check_pair


class FusedConvBN2dFunction(torch.autograd.Function):
    """Training-mode conv → batch norm that recomputes the conv in backward instead of saving it.

    Saves x, the conv weight, the BN weight and the per-channel batch mean and 1/std; the
    built-in pair also keeps the whole conv output. Forward runs the aten kernels the built-in
    pair runs (convolution, native_batch_norm), so outputs and running-stat updates match it
    bit for bit on CPU, and so do gradients while the conv output is at most ONE_CALL_BYTES
    (conv_bn_backward.py). Beyond that, backward writes batch norm's gradient into the recomputed
    conv output and runs the conv backward over batch slices, so a large batch's peak stays
    low; its gradients then match the pair's to rounding. The backward is itself
    differentiable (then through aten's kernels).
    `conv` is torch.convolution's trailing arguments: (stride, padding, dilation, False,
    (0, 0), groups).

    Mutates its inputs: forward updates `running_mean` and `running_var` in place (buffers that
    never require grad), as F.batch_norm does; torch.compile traces that mutation
    (tests/models/test_compile.py checks the compiled stats equal eager's).
    """

    @staticmethod
    def forward(x, weight, bn_weight, bn_bias, running_mean, running_var, momentum, eps, conv):
        y = torch.convolution(x, weight, None, *conv)
        # Updates running_mean/running_var in place (unbiased variance), as F.batch_norm does.
        return torch.native_batch_norm(
            y, bn_weight, bn_bias, running_mean, running_var, True, momentum, eps
        )

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, weight, bn_weight = inputs[:3]
        _, save_mean, save_invstd = output
        ctx.mark_non_differentiable(save_mean, save_invstd)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, weight, bn_weight, save_mean, save_invstd)
        ctx.eps, ctx.conv = inputs[7:]

    @staticmethod
    def backward(ctx, grad_out, _grad_mean, _grad_invstd):
        need_x, need_w, need_g, need_b = ctx.needs_input_grad[:4]
        if grad_out is None:
            return (None,) * 9
        if not (need_x or need_w or need_g):
            # d(out)/d(bias) is 1: no conv recompute for the bias gradient alone.
            return None, None, None, grad_out.sum((0, 2, 3)), *(None,) * 5
        x, weight, bn_weight, save_mean, save_invstd = ctx.saved_tensors
        # aten's kernels where the sliced and in-place pieces would not pay or cannot serve: an
        # output of at most ONE_CALL_BYTES (the built-in pair's exact gradients, a peak that
        # stays small), double backward (differentiable) and the half precisions (aten
        # computes them in float).
        sliced = not torch.is_grad_enabled() and x.dtype in (torch.float32, torch.float64)
        if sliced:
            y = conv_in_slices(x, weight, ctx.conv)
        else:
            y = torch.convolution(x, weight, None, *ctx.conv)
        # aten's batch-norm backward reads grad_out as if in y's memory format.
        fmt = torch.contiguous_format if y.is_contiguous() else torch.channels_last
        grad_out = grad_out.contiguous(memory_format=fmt)
        if not sliced or len(batch_slices(y)) == 1:
            mask = [need_x or need_w, need_g, need_b]
            grad_y, grad_g, grad_b = torch.ops.aten.native_batch_norm_backward(
                grad_out, y, bn_weight, None, None, save_mean, save_invstd, True, ctx.eps, mask
            )
            del y  # free the recomputed activation before the conv backward allocates its grads
        else:
            grad_y, grad_g, grad_b = batch_norm_backward_into(
                y, grad_out, bn_weight, save_mean, save_invstd
            )
        grad_x = grad_w = None
        if need_x or need_w:
            grad_x, grad_w = conv_backward_in_slices(grad_y, x, weight, ctx.conv, need_x, need_w)
        grad_g, grad_b = (grad_g if need_g else None), (grad_b if need_b else None)
        return grad_x, grad_w, grad_g, grad_b, *(None,) * 5


_apply = compile_safe_apply(FusedConvBN2dFunction)


def fused_conv_bn2d_builtin(
    x: torch.Tensor,
    weight: torch.Tensor,
    bn_weight: torch.Tensor | None = None,
    bn_bias: torch.Tensor | None = None,
    running_mean: torch.Tensor | None = None,
    running_var: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] | str = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
) -> torch.Tensor:
    """F.conv2d (no bias) then F.batch_norm, the built-in twin."""
    y = F.conv2d(x, weight, None, stride, padding, dilation, groups)
    return F.batch_norm(y, running_mean, running_var, bn_weight, bn_bias, training, momentum, eps)


def fused_conv_bn2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bn_weight: torch.Tensor | None = None,
    bn_bias: torch.Tensor | None = None,
    running_mean: torch.Tensor | None = None,
    running_var: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] | str = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    impl: str = "custom",
) -> torch.Tensor:
    """batch_norm(conv2d(x, weight), ...) with F.conv2d/F.batch_norm's arguments and semantics."""
    stride = check_pair(OP, stride, "stride", 1)
    dilation = check_pair(OP, dilation, "dilation", 1)
    bn = (bn_weight, bn_bias, running_mean, running_var)
    pad, extra = check_conv_bn(
        x, weight, bn, training, momentum, eps, stride, padding, dilation, groups
    )
    check_impl(OP, impl)
    if impl == "builtin" or (training and not (x.shape[0] and x.shape[1])):
        # An empty conv output (N = 0, or C_in = 0, which aten maps to 0 output channels):
        # native_batch_norm refuses it, F.batch_norm returns it empty and keeps the stats.
        conv = (stride, padding, dilation, groups)
        return fused_conv_bn2d_builtin(x, weight, *bn, training, momentum, eps, *conv)
    if extra != (0, 0):
        # padding='same' with an even dilated kernel: pad the far side, as aten does.
        x = F.pad(x, (0, extra[1], 0, extra[0]))
    if not training:
        return _conv_bn_eval(x, weight, *bn, eps, stride, pad, dilation, groups)
    conv = (stride, pad, dilation, False, (0, 0), groups)
    return _conv_bn_train(x, weight, *bn, float(momentum), float(eps), conv)


def _conv_bn_train(
    x, weight, bn_weight, bn_bias, running_mean, running_var, momentum, eps, conv
) -> torch.Tensor:
    """Training mode: FusedConvBN2dFunction on layouts aten's kernels read right."""
    # aten's CPU batch-norm kernels read strided per-channel tensors as if contiguous when the
    # conv output is channels_last-contiguous (any 1x1 output is), and its conv backward
    # refuses some strided weights. Contiguous copies (no-ops on contiguous tensors) keep the
    # gradients right; autograd maps them back to the caller's tensors.
    if not weight.is_contiguous():
        weight = _canonical_strides(weight, suggest_memory_format(weight))
    bn_weight, bn_bias = _contiguous(bn_weight), _contiguous(bn_bias)
    mean, var = _contiguous(running_mean), _contiguous(running_var)
    args = (mean, var, momentum, eps, conv)
    out, _, _ = _apply(x, weight, bn_weight, bn_bias, *args)
    # The running-stat update landed in the copies of strided stats: hand it to the caller's.
    for stat, copy in ((running_mean, mean), (running_var, var)):
        if copy is not stat:
            with torch.no_grad():
                stat.copy_(copy)
    return out


def _contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """`t` itself if contiguous or None, else a contiguous copy."""
    return t if t is None else t.contiguous()


def _conv_bn_eval(
    x, weight, bn_weight, bn_bias, running_mean, running_var, eps, stride, padding, dilation, groups
) -> torch.Tensor:
    """Eval mode: BN is a per-channel affine map, folded into the conv's weight and bias."""
    # One conv with bias instead of conv + a BN pass; autograd saves only x and the folded
    # weight, and differentiates the fold for the weight/BN-parameter gradients.
    scale = torch.rsqrt(running_var + eps)
    if bn_weight is not None:
        scale = scale * bn_weight
    shift = -running_mean * scale
    if bn_bias is not None:
        shift = shift + bn_bias
    folded = weight * scale.view(-1, 1, 1, 1)
    if not folded.is_contiguous():
        folded = _canonical_strides(folded, suggest_memory_format(weight))
    return F.conv2d(x, folded, shift, stride, padding, dilation, groups)


def _canonical_strides(w: torch.Tensor, memory_format: torch.memory_format) -> torch.Tensor:
    """`w`, copied unless it already has the exact strides of `memory_format`."""
    # aten's CPU conv backward refuses to compute the gradient of some strided weights ("slow_
    # conv2d: grad_weight must be contiguous"); the fold needs it whenever BN's weight or the
    # conv weight requires grad. The format is the one aten's conv picks for the caller's
    # weight, so the output's layout stays the twin's.
    _, c, h, k = w.shape
    if memory_format == torch.channels_last:
        canonical = (h * k * c, 1, k * c, c)
    else:
        canonical = (c * h * k, h * k, k, 1)
    return w if w.stride() == canonical else w.clone(memory_format=memory_format)
