"""Conv2d (no bias) then BatchNorm2d as one autograd op that keeps only its input for backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_float_tensor, check_impl, check_same_dtype_device
from ._function import Function

OP = "fused_conv_bn2d"


class FusedConvBN2dFunction(Function):
    """Training-mode conv → batch norm that recomputes the conv in backward instead of saving it.

    Saves x, the conv weight, the BN weight and the per-channel batch mean and 1/std; the
    built-in pair also keeps the whole conv output. Forward and backward are the aten kernels
    the built-in pair runs (convolution, native_batch_norm and their backwards), so results and
    running-stat updates match it bit for bit on CPU. The backward is itself differentiable.
    `conv` is torch.convolution's trailing arguments: (stride, padding, dilation, False,
    (0, 0), groups).
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
        y = torch.convolution(x, weight, None, *ctx.conv)
        mask = [need_x or need_w, need_g, need_b]
        grad_y, grad_g, grad_b = torch.ops.aten.native_batch_norm_backward(
            grad_out, y, bn_weight, None, None, save_mean, save_invstd, True, ctx.eps, mask
        )
        del y  # free the recomputed activation before the conv backward allocates its grads
        grad_x = grad_w = None
        if need_x or need_w:
            grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
                grad_y, x, weight, None, *ctx.conv, [need_x, need_w, False]
            )
        grad_g, grad_b = (grad_g if need_g else None), (grad_b if need_b else None)
        return grad_x, grad_w, grad_g, grad_b, *(None,) * 5


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
    stride, dilation = _pair(stride, "stride", 1), _pair(dilation, "dilation", 1)
    bn = (bn_weight, bn_bias, running_mean, running_var)
    pad, extra = _check(x, weight, bn, training, momentum, eps, stride, padding, dilation, groups)
    if impl == "builtin":
        conv = (stride, padding, dilation, groups)
        return fused_conv_bn2d_builtin(x, weight, *bn, training, momentum, eps, *conv)
    check_impl(OP, impl)
    if extra != (0, 0):
        # padding='same' with an even dilated kernel: pad the far side, as aten does.
        x = F.pad(x, (0, extra[1], 0, extra[0]))
    if not training:
        return _conv_bn_eval(x, weight, *bn, eps, stride, pad, dilation, groups)
    conv = (stride, pad, dilation, False, (0, 0), groups)
    momentum, eps = float(momentum), float(eps)
    args = (running_mean, running_var, momentum, eps, conv)
    out, _, _ = FusedConvBN2dFunction.apply(x, weight, bn_weight, bn_bias, *args)
    return out


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
    return F.conv2d(x, weight * scale.view(-1, 1, 1, 1), shift, stride, padding, dilation, groups)


def _pair(value, name: str, minimum: int) -> tuple[int, int]:
    """(v, v) from an int, or the 2-tuple itself, each checked to be an int ≥ minimum."""
    pair = (value, value) if isinstance(value, int) else value
    pair = tuple(pair) if isinstance(pair, (tuple, list, torch.Size)) else None
    if (
        pair is None
        or len(pair) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in pair)
    ):
        raise ValueError(
            f"{OP}: {name} must be an int ≥ {minimum} or a pair of them, got {value!r}"
        )
    return pair


def _padding(padding, weight: torch.Tensor, stride, dilation):
    """Symmetric padding per dim and the extra far-side padding 'same' may need."""
    if not isinstance(padding, str):
        return _pair(padding, "padding", 0), (0, 0)
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding != "same":
        raise ValueError(
            f"{OP}: padding must be an int, a pair, 'valid' or 'same', got {padding!r}"
        )
    if stride != (1, 1):
        raise ValueError(
            f"{OP}: padding='same' is not supported for strided convolutions, got stride={stride}"
        )
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:], strict=True)]
    return tuple(t // 2 for t in total), tuple(t % 2 for t in total)


def _check(x, weight, bn, training, momentum, eps, stride, padding, dilation, groups):
    """Validate like nn.Conv2d + nn.BatchNorm2d, with errors naming the op; return padding."""
    check_float_tensor(OP, "x", x)
    check_float_tensor(OP, "weight", weight)
    named = dict(zip(("bn_weight", "bn_bias", "running_mean", "running_var"), bn, strict=True))
    for name, t in named.items():
        if t is not None:
            check_float_tensor(OP, name, t)
    check_same_dtype_device(OP, "x", x, weight=weight, **named)
    if x.dim() != 4:
        raise ValueError(
            f"{OP}: expected 4-D input (N, C, H, W), got {x.dim()}-D input "
            f"of shape {tuple(x.shape)}"
        )
    if weight.dim() != 4:
        raise ValueError(
            f"{OP}: weight must be 4-D (out_channels, in_channels/groups, kH, kW), "
            f"got shape {tuple(weight.shape)}"
        )
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{OP}: groups must be a positive int, got {groups!r}")
    c_in, c_out = x.shape[1], weight.shape[0]
    if c_in % groups:
        raise ValueError(f"{OP}: input channels ({c_in}) are not divisible by groups={groups}")
    if c_out % groups:
        raise ValueError(
            f"{OP}: weight's out_channels ({c_out}) are not divisible by groups={groups}"
        )
    if c_in != weight.shape[1] * groups:
        raise ValueError(
            f"{OP}: channel mismatch: input has {c_in} channels but weight of shape "
            f"{tuple(weight.shape)} with groups={groups} expects "
            f"{weight.shape[1] * groups}"
        )
    for name, t in named.items():
        if t is not None and tuple(t.shape) != (c_out,):
            raise ValueError(
                f"{OP}: {name} must have shape ({c_out},) to match weight's "
                f"out_channels, got {tuple(t.shape)}"
            )
    if (named["running_mean"] is None) != (named["running_var"] is None):
        raise ValueError(f"{OP}: pass both running_mean and running_var, or neither")
    if not training and named["running_mean"] is None:
        raise ValueError(f"{OP}: training=False needs running_mean and running_var")
    for name, value in (("momentum", momentum), ("eps", eps)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(
                f"{OP}: {name} must be a float, got {value!r}"
                + ("; the module handles momentum=None" if value is None else "")
            )
    pad, extra = _padding(padding, weight, stride, dilation)
    out_hw = [
        (size + 2 * p + e - d * (k - 1) - 1) // s + 1
        for size, p, e, d, k, s in zip(
            x.shape[2:], pad, extra, dilation, weight.shape[2:], stride, strict=True
        )
    ]
    if min(out_hw) < 1:
        raise ValueError(
            f"{OP}: input of spatial size {tuple(x.shape[2:])} (padded by {pad}) "
            f"is smaller than the dilated kernel of weight {tuple(weight.shape)}"
        )
    if training and x.shape[0] * out_hw[0] * out_hw[1] == 1:
        raise ValueError(
            f"{OP}: expected more than 1 value per channel when training, got a "
            f"conv output of shape {(x.shape[0], c_out, *out_hw)}"
        )
    return pad, extra
