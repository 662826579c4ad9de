"""Drop-in nn.Modules running an op: ours by default, or any callable with the op's arguments."""

from collections.abc import Callable

import torch
from torch import nn

from .ops import fused_conv_bn2d, linear, relu, rms_norm
from .ops.fused_conv_bn import Pair

Op = Callable[..., torch.Tensor]


def op_name(op: Op) -> str:
    """How a repr names an op: its qualified name."""
    return getattr(op, "__qualname__", None) or repr(op)


class Linear(nn.Linear):
    """nn.Linear (same parameters, init and state_dict) computing `op(x, weight, bias)`."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 op: Op = linear, device=None, dtype=None) -> None:
        super().__init__(in_features, out_features, bias, device, dtype)
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """op(x, weight, bias), by default x @ weight.T + bias."""
        return self.op(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, op={op_name(self.op)}"


class Activation(nn.Module):
    """An elementwise activation `op(x)`: ours relu by default (a Swish, a GELU, an STE...)."""

    def __init__(self, *, op: Op = relu) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """op(x), by default max(x, 0)."""
        return self.op(x)

    def extra_repr(self) -> str:
        return f"op={op_name(self.op)}"


class FusedConvBN2d(nn.Sequential):
    """nn.Sequential(nn.Conv2d(bias=False), nn.BatchNorm2d) (same state_dict) run as one op.

    `op` takes fused_conv_bn2d's arguments; nn.BatchNorm2d's train/eval, momentum=None and
    track_running_stats rules are applied here, as the module pair applies them.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Pair, stride: Pair = 1,
                 padding: Pair | str = 0, dilation: Pair = 1, groups: int = 1, eps: float = 1e-5,
                 momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, *, op: Op = fused_conv_bn2d, device=None,
                 dtype=None) -> None:
        factory = {"device": device, "dtype": dtype}
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                      bias=False, **factory),
            nn.BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats, **factory))
        self.op = op

    @classmethod
    def from_pair(cls, conv: nn.Conv2d, bn: nn.BatchNorm2d, *,
                  op: Op = fused_conv_bn2d) -> "FusedConvBN2d":
        """The layer made of these modules themselves (their parameters and buffers)."""
        layer = cls.__new__(cls)
        nn.Sequential.__init__(layer, conv, bn)
        layer.op = op
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """bn(conv(x)) through `op`."""
        conv, bn = self[0], self[1]
        count = bn.training and bn.track_running_stats and bn.num_batches_tracked is not None
        factor = 0.0 if bn.momentum is None else bn.momentum
        if count and bn.momentum is None:  # cumulative moving average
            factor = 1.0 / float(bn.num_batches_tracked + 1)
        use_batch_stats = bn.training or (bn.running_mean is None and bn.running_var is None)
        keep_stats = not bn.training or bn.track_running_stats
        stats = (bn.running_mean, bn.running_var) if keep_stats else (None, None)
        out = self.op(x, conv.weight, bn.weight, bn.bias, *stats, use_batch_stats, factor,
                      bn.eps, conv.stride, conv.padding, conv.dilation, conv.groups)
        if count:  # after the op accepted the input, as nn.BatchNorm2d
            bn.num_batches_tracked.add_(1)
        return out

    def extra_repr(self) -> str:
        return f"op={op_name(self.op)}"


class RMSNorm(nn.Module):
    """RMSNorm over the last dim (weight of ones, as nn.RMSNorm) computing `op(x, weight, eps)`."""

    def __init__(self, dim: int, eps: float = 1e-6, *, op: Op = rms_norm, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))
        self.eps, self.op = eps, op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """op(x, weight, eps), by default x / rms(x) · weight."""
        return self.op(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, op={op_name(self.op)}"
