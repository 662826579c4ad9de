"""nn.Modules built on the op library. Each layer's `impl` says which function runs its op:
"custom" (ours), "builtin" (PyTorch's twin) or any function taking the op's arguments."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .conv_bn import FusedConvBN2d, fuse_conv_bn, unfuse_conv_bn  # noqa: F401
from .ops import linear, relu
from .ops._checks import check_impl, impl_name
from .ops.conv_bn_checks import check_param_dtype

Impl = str | Callable[..., torch.Tensor]


class Linear(nn.Module):
    """Drop-in for nn.Linear (same parameters, init and state_dict) running `impl`'s linear."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        impl: Impl = "custom",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_impl("Linear", impl, function_ok=True)
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Linear: {name} must be a positive int, got {value!r}")
        check_param_dtype("Linear", dtype)
        self.in_features = in_features
        self.out_features = out_features
        self.impl = impl
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialize exactly as nn.Linear does (Kaiming-uniform weight, fan-in-bounded bias)."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x @ weight.T + bias."""
        if callable(self.impl):
            return self.impl(x, self.weight, self.bias)
        return linear(x, self.weight, self.bias, self.impl)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, impl={impl_name(self.impl)}"
        )


class ReLU(nn.Module):
    """Drop-in for nn.ReLU running the custom op (saves its output, shared with the next layer);
    with a function as `impl`, any elementwise activation (a Swish, a GELU, an STE)."""

    def __init__(self, impl: Impl = "custom") -> None:
        super().__init__()
        check_impl("ReLU", impl, function_ok=True)
        self.impl = impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """max(x, 0), or `impl(x)`."""
        return self.impl(x) if callable(self.impl) else relu(x, self.impl)

    def extra_repr(self) -> str:
        return f"impl={impl_name(self.impl)}"
