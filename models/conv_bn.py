"""FusedConvBN2d: Conv2d(bias=False) → BatchNorm2d as one module, and (un)fusing them in models.

The module's children are named "0" (an nn.Conv2d) and "1" (an nn.BatchNorm2d), so its
parameters, buffers and state_dict keys are exactly those of
`nn.Sequential(nn.Conv2d(..., bias=False), nn.BatchNorm2d(...))`: a checkpoint moves between
impl="custom", impl="builtin" and the plain Sequential without any key mapping.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .ops._checks import check_impl, impl_name
from .ops.conv_bn_checks import check_padding, check_pair, check_param_dtype
from .ops.fused_conv_bn import fused_conv_bn2d

NAME = "FusedConvBN2d"


class FusedConvBN2d(nn.Module):
    """Drop-in for nn.Sequential(nn.Conv2d(bias=False), nn.BatchNorm2d) running one fused op."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        impl: str = "custom",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("in_channels", in_channels),
            ("out_channels", out_channels),
            ("groups", groups),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{NAME}: {name} must be a positive int, got {value!r}")
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            if value % groups:
                raise ValueError(f"{NAME}: {name}={value} is not divisible by groups={groups}")
        # nn.Conv2d takes sizes < 1, non-ints and 'same' with a stride, and fails later (if at
        # all) with messages that don't name this class.
        kernel_size = check_pair(NAME, kernel_size, "kernel_size", 1)
        stride = check_pair(NAME, stride, "stride", 1)
        dilation = check_pair(NAME, dilation, "dilation", 1)
        padding = check_padding(NAME, padding, stride)
        check_param_dtype(NAME, dtype)
        factory = {"device": device, "dtype": dtype}
        conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias=False,
            **factory,
        )
        bn = nn.BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats, **factory)
        self._init_children(conv, bn, impl)

    @classmethod
    def from_modules(cls, conv: nn.Conv2d, bn: nn.BatchNorm2d, impl: str = "custom"):
        """Wrap an existing conv and BN, sharing (not copying) their parameters and buffers."""
        if not _fusable(conv, bn):
            raise ValueError(
                f"{NAME}: from_modules needs an nn.Conv2d with bias=False and padding_mode="
                f"'zeros' followed by an nn.BatchNorm2d of its out_channels, got "
                f"{type(conv).__name__} and {type(bn).__name__}"
            )
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._init_children(conv, bn, impl)
        return self

    def _init_children(self, conv: nn.Conv2d, bn: nn.BatchNorm2d, impl: str) -> None:
        check_impl(NAME, impl, function_ok=True)
        self.impl = impl
        self.add_module("0", conv)
        self.add_module("1", bn)

    @property
    def conv(self) -> nn.Conv2d:
        """The convolution (child "0")."""
        return self._modules["0"]

    @property
    def bn(self) -> nn.BatchNorm2d:
        """The batch norm (child "1")."""
        return self._modules["1"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """bn(conv(x)), with nn.BatchNorm2d's train/eval and running-stat rules."""
        return conv_bn_forward(self.conv, self.bn, x, self._op)

    def _op(self, *args: object) -> torch.Tensor:
        if callable(self.impl):
            return self.impl(*args)
        return fused_conv_bn2d(*args, impl=self.impl)

    def extra_repr(self) -> str:
        return f"impl={impl_name(self.impl)}"


def conv_bn_forward(
    conv: nn.Conv2d, bn: nn.BatchNorm2d, x: torch.Tensor, op: Callable[..., torch.Tensor]
) -> torch.Tensor:
    """op(x, conv and BN tensors, training, momentum, eps, conv options) (fused_conv_bn2d's
    positional arguments), with nn.BatchNorm2d's train/eval and running-stat rules."""
    # nn.BatchNorm2d's own momentum / num_batches_tracked / eval-without-stats rules; the
    # count is bumped only after the op accepted the input.
    count = bn.training and bn.track_running_stats and bn.num_batches_tracked is not None
    factor = 0.0 if bn.momentum is None else bn.momentum
    if count and bn.momentum is None:  # cumulative moving average
        factor = 1.0 / float(bn.num_batches_tracked + 1)
    use_batch_stats = bn.training or (bn.running_mean is None and bn.running_var is None)
    keep_stats = not bn.training or bn.track_running_stats
    out = op(
        x, conv.weight, bn.weight, bn.bias,
        bn.running_mean if keep_stats else None, bn.running_var if keep_stats else None,
        use_batch_stats, factor, bn.eps,
        conv.stride, conv.padding, conv.dilation, conv.groups,
    )  # fmt: skip
    if count:
        bn.num_batches_tracked.add_(1)
    return out


class FusedAway(nn.Identity):
    """Holds the slot of a BatchNorm2d that fuse_conv_bn moved into the FusedConvBN2d before it.

    Keeping the slot keeps the indices, and so the state_dict keys, of the layers after it.
    """


def _fusable(conv: nn.Module, bn: nn.Module) -> bool:
    return (
        type(conv) is nn.Conv2d
        and conv.bias is None
        and conv.padding_mode == "zeros"
        and type(bn) is nn.BatchNorm2d
        and bn.num_features == conv.out_channels
    )


def fuse_conv_bn(model: nn.Module, impl: str = "custom") -> nn.Module:
    """Replace each Conv2d(bias=False) → BatchNorm2d pair of an nn.Sequential, in place.

    A Sequential that is exactly such a pair becomes a FusedConvBN2d (same state_dict keys);
    a pair inside a longer Sequential puts a FusedConvBN2d in the conv's slot and a FusedAway in
    the BN's (its keys move from "i.*"/"i+1.*" to "i.0.*"/"i.1.*"; unfuse_conv_bn restores them).
    Parameters and buffers are shared, not copied. Returns the model (or its replacement).
    """
    check_impl(NAME, impl)
    if isinstance(model, nn.Sequential) and len(model) == 2 and _fusable(model[0], model[1]):
        return FusedConvBN2d.from_modules(model[0], model[1], impl)
    for name, child in list(model.named_children()):
        new = fuse_conv_bn(child, impl)
        if new is not child:
            setattr(model, name, new)
    if isinstance(model, nn.Sequential):
        i = 0
        while i < len(model) - 1:
            if _fusable(model[i], model[i + 1]):
                model[i] = FusedConvBN2d.from_modules(model[i], model[i + 1], impl)
                model[i + 1] = FusedAway()
                i += 2
            else:
                i += 1
    return model


def unfuse_conv_bn(model: nn.Module) -> nn.Module:
    """Undo fuse_conv_bn in place: plain nn.Conv2d and nn.BatchNorm2d sharing the same tensors.

    A FusedConvBN2d becomes nn.Sequential(conv, bn) (same state_dict keys); one followed by a
    FusedAway in a Sequential gets its conv and BN put back into the two slots.
    """
    if isinstance(model, FusedConvBN2d):
        return nn.Sequential(model.conv, model.bn)
    if isinstance(model, nn.Sequential):
        for i in range(len(model) - 1):
            if isinstance(model[i], FusedConvBN2d) and isinstance(model[i + 1], FusedAway):
                fused = model[i]
                model[i], model[i + 1] = fused.conv, fused.bn
    for name, child in list(model.named_children()):
        new = unfuse_conv_bn(child)
        if new is not child:
            setattr(model, name, new)
    return model
