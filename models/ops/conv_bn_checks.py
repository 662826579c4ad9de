"""Argument checks of fused_conv_bn2d and the layers: clear errors naming the op or class."""

from __future__ import annotations

import torch

from ._checks import FLOAT_DTYPES, check_float_tensor, check_same_dtype_device

OP = "fused_conv_bn2d"


def check_param_dtype(owner: str, dtype: object) -> None:
    """Raise TypeError unless a layer's `dtype` argument is None or a floating-point dtype."""
    # Parameters must be able to require grad, and the ops run on real floating point only.
    if dtype is not None and dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{owner}: dtype must be a floating-point dtype (float16, bfloat16, float32, "
            f"float64) or None for the default, got {dtype!r}; e.g. dtype=torch.float32"
        )


def check_pair(op: str, value: object, name: str, minimum: int) -> tuple[int, int]:
    """(v, v) from an int, or the 2-tuple itself, each checked to be an int ≥ minimum."""
    pair = (value, value) if isinstance(value, int) else value
    pair = tuple(pair) if isinstance(pair, (tuple, list, torch.Size)) else None
    if (
        pair is None
        or len(pair) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in pair)
    ):
        raise ValueError(
            f"{op}: {name} must be an int ≥ {minimum} or a pair of them, got {value!r}"
        )
    return pair


def check_padding(op: str, padding: object, stride: tuple[int, int]) -> tuple[int, int] | str:
    """The padding as a checked pair, or 'valid' / 'same' (which needs stride 1)."""
    if not isinstance(padding, str):
        return check_pair(op, padding, "padding", 0)
    if padding not in ("valid", "same"):
        raise ValueError(
            f"{op}: padding must be an int, a pair, 'valid' or 'same', got {padding!r}"
        )
    if padding == "same" and stride != (1, 1):
        raise ValueError(
            f"{op}: padding='same' is not supported for strided convolutions, got "
            f"stride={stride}; use stride=1 or an explicit padding"
        )
    return padding


def _padding(padding, weight: torch.Tensor, stride, dilation):
    """Symmetric padding per dim and the extra far-side padding 'same' may need."""
    padding = check_padding(OP, padding, stride)
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding != "same":
        return padding, (0, 0)
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:], strict=True)]
    return tuple(t // 2 for t in total), tuple(t % 2 for t in total)


def check_conv_bn(x, weight, bn, training, momentum, eps, stride, padding, dilation, groups):
    """Validate like nn.Conv2d + nn.BatchNorm2d, with errors naming the op; return padding.

    Stricter than F.conv2d where aten would fail: every call this accepts runs in both impls.
    """
    check_float_tensor(OP, "x", x)
    check_float_tensor(OP, "weight", weight)
    named = dict(zip(("bn_weight", "bn_bias", "running_mean", "running_var"), bn, strict=True))
    for name, t in named.items():
        if t is not None:
            check_float_tensor(OP, name, t)
    check_same_dtype_device(OP, "x", x, weight=weight, **named)
    _check_conv_shapes(x, weight, groups)
    _check_bn_args(named, weight.shape[0], training, momentum, eps)
    pad, extra = _padding(padding, weight, stride, dilation)
    _check_output_size(x, weight, training, pad, extra, stride, dilation)
    return pad, extra


def _check_conv_shapes(x: torch.Tensor, weight: torch.Tensor, groups: object) -> None:
    """Raise ValueError unless x, weight and groups make a valid 2-D convolution."""
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
    if weight.shape[0] == 0 or 0 in weight.shape[2:]:
        raise ValueError(
            f"{OP}: weight of shape {tuple(weight.shape)} is empty; out_channels, kH and kW "
            "must be ≥ 1"
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


def _check_bn_args(named: dict, c_out: int, training: bool, momentum, eps) -> None:
    """Raise unless the batch-norm tensors have one value per output channel and the running
    stats, momentum and eps fit the mode."""
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
    for name in ("running_mean", "running_var"):
        stat = named[name]
        if training and stat is not None and stat.numel() > 1 and 0 in stat.stride():
            # F.batch_norm would store one value for every channel.
            raise ValueError(
                f"{OP}: {name} is an expanded view (its elements share memory), so training "
                f"cannot update it in place; pass {name}.clone()"
            )
    for name, value in (("momentum", momentum), ("eps", eps)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(
                f"{OP}: {name} must be a float, got {value!r}"
                + ("; the module handles momentum=None" if value is None else "")
            )


def _check_output_size(x, weight, training, pad, extra, stride, dilation) -> None:
    """Raise ValueError unless the convolution's output is non-empty (and, when training, has
    more than one value per channel for the batch statistics)."""
    c_in, c_out = x.shape[1], weight.shape[0]
    if 0 in x.shape[2:] and x.shape[0] and c_in:
        # aten convolves an empty input only when the batch or the channels are what's empty.
        raise ValueError(
            f"{OP}: input of shape {tuple(x.shape)} has an empty spatial dim; H and W must "
            "be ≥ 1 (only N or C may be 0)"
        )
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
