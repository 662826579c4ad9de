"""Run one op of a model through another function: `swap_op(model, "activation", fn)`.

Each layer that runs the op (ReLU, Linear, FusedConvBN2d, or the Poly3 model for legendre_p3)
is replaced by an `OpCall` module that calls `fn` with the op's positional arguments (see
`models.ops.choice`), sharing the layer's parameters and buffers under the same state_dict keys.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .conv_bn import FusedConvBN2d, conv_bn_forward
from .layers import Linear, ReLU
from .poly3 import Poly3


class OpCall(nn.Module):
    """A layer whose op runs as `self.fn`; `op` names the op."""

    op = ""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def extra_repr(self) -> str:
        return f"fn={getattr(self.fn, '__qualname__', repr(self.fn))}"


class ReLUCall(OpCall):
    """relu(x)."""

    op = "activation"

    def __init__(self, fn: Callable[..., torch.Tensor], layer: nn.Module | None = None) -> None:
        super().__init__(fn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """fn(x)."""
        return self.fn(x)


class LinearCall(OpCall):
    """linear(x, weight, bias) with the layer's weight and bias."""

    op = "linear"

    def __init__(self, fn: Callable[..., torch.Tensor], layer: nn.Module) -> None:
        super().__init__(fn)
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.weight = layer.weight
        self.register_parameter("bias", layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """fn(x, weight, bias)."""
        return self.fn(x, self.weight, self.bias)


class ConvBNCall(OpCall):
    """conv_bn(x, ...) with the layer's conv ("0") and batch norm ("1")."""

    op = "conv_bn"

    def __init__(self, fn: Callable[..., torch.Tensor], layer: nn.Module) -> None:
        super().__init__(fn)
        self.add_module("0", layer.conv)
        self.add_module("1", layer.bn)

    # The same children, and the same nn.BatchNorm2d bookkeeping around the op.
    conv, bn = FusedConvBN2d.conv, FusedConvBN2d.bn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """fn(x, conv and BN tensors, ...), with nn.BatchNorm2d's train/eval and stats rules."""
        return conv_bn_forward(self.conv, self.bn, x, self.fn)


class Poly3Call(OpCall):
    """The Poly3 model a + b * legendre_p3(c + d x) with its four parameters."""

    op = "legendre_p3"

    def __init__(self, fn: Callable[..., torch.Tensor], layer: nn.Module) -> None:
        super().__init__(fn)
        self.a, self.b, self.c, self.d = layer.a, layer.b, layer.c, layer.d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """a + b * fn(c + d x)."""
        return self.a + self.b * self.fn(self.c + self.d * x)

    # The poly3 task describes and draws its model by its formula, whichever fn runs P3.
    formula = Poly3.formula


# op -> (the layer types that run it, the module that replaces them)
SWAPS: dict[str, tuple[tuple[type[nn.Module], ...], type[OpCall]]] = {
    "activation": ((ReLU, nn.ReLU, ReLUCall), ReLUCall),
    "linear": ((Linear, nn.Linear, LinearCall), LinearCall),
    "conv_bn": ((FusedConvBN2d, ConvBNCall), ConvBNCall),
    "legendre_p3": ((Poly3, Poly3Call), Poly3Call),
}


def swap_op(model: nn.Module, op: str, fn: Callable[..., torch.Tensor]) -> nn.Module:
    """`model` with every layer running `op` replaced, in place, by one calling `fn`; returns
    the model (a new module when `model` itself is such a layer)."""
    if op not in SWAPS:
        raise ValueError(f"swap_op: unknown op {op!r}; choose one of {sorted(SWAPS)}")
    layer_types, call = SWAPS[op]
    if isinstance(model, layer_types):
        return call(fn, model)
    for name, child in list(model.named_children()):
        new = swap_op(child, op, fn)
        if new is not child:
            setattr(model, name, new)
    return model
