"""The app's op slots: our function, PyTorch's twin, and the inputs each slot is called with.

The reference inputs are called the way the models call the op: conv_bn with tuple stride,
padding and dilation (as nn.Conv2d stores them) in training and in eval mode, linear on N-D
input, the activation on edge values, an empty and a non-contiguous tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .fused_conv_bn import fused_conv_bn2d, fused_conv_bn2d_builtin
from .legendre import legendre_p3, legendre_p3_builtin
from .linear import linear
from .relu_output import relu

Case = tuple[str, tuple]  # (what the case tries, the op's positional arguments)


@dataclass(frozen=True)
class OpEntry:
    """One app op: our function, PyTorch's twin, and makers of reference inputs."""

    custom: Callable[..., torch.Tensor]
    builtin: Callable[..., torch.Tensor]
    # inputs(size, dtype, device, requires_grad, seed) -> the op's positional arguments;
    # `size` scales the batch dimension, values stay away from kinks (relu's 0).
    inputs: Callable[..., tuple]
    signature: str
    differentiable: tuple[int, ...] = (0,)  # positions of the arguments gradients flow to
    # cases(dtype, device, requires_grad) -> the other ways the models call the op
    cases: Callable[..., list[Case]] = field(default=lambda *a, **k: [])

    @property
    def arg_names(self) -> tuple[str, ...]:
        """The argument names of `signature`, e.g. ('x', 'weight', 'bias')."""
        inside = self.signature[self.signature.index("(") + 1 : self.signature.rindex(")")]
        return tuple(part.strip() for part in inside.split(","))


def _leaf(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    return t.requires_grad_(requires_grad)


def _away_from_zero(shape, dtype, device, g) -> torch.Tensor:
    t = torch.randn(*shape, generator=g, dtype=torch.float64)
    return (t + 0.1 * t.sign()).to(device, dtype)


def _unary_inputs(size=4, dtype=torch.float32, device="cpu", requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (_leaf(_away_from_zero((size, 8), dtype, device, g), requires_grad),)


EDGE_VALUES = (0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.5, -1.5, 1e-3)


def _unary_cases(dtype, device, requires_grad=False) -> list[Case]:
    g = torch.Generator().manual_seed(5)
    edge = torch.tensor(EDGE_VALUES, dtype=dtype, device=device)
    # A transposed leaf's view: strides (1, 8), as a permuted activation would be.
    base = _leaf(_away_from_zero((8, 4), dtype, device, g), requires_grad)
    return [
        ("edge values 0, -0, ±inf, NaN", (_leaf(edge, requires_grad),)),
        ("empty input (0, 8)", (_leaf(torch.empty(0, 8, dtype=dtype, device=device),
                                      requires_grad),)),  # fmt: skip
        ("non-contiguous input (4, 8)", (base.T,)),
    ]


def _p3_cases(dtype, device, requires_grad=False) -> list[Case]:
    g = torch.Generator().manual_seed(6)
    one_d = _leaf(_away_from_zero((16,), dtype, device, g), requires_grad)
    return [("1-D input (16,), as in poly3", (one_d,)), *_unary_cases(dtype, device, requires_grad)]


def _linear_inputs(size=4, dtype=torch.float32, device="cpu", requires_grad=False, seed=0,
                   lead=None):  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    shapes = ((*(lead or (size,)), 8), (5, 8), (5,))
    return tuple(_leaf(_away_from_zero(s, dtype, device, g), requires_grad) for s in shapes)


def _linear_cases(dtype, device, requires_grad=False) -> list[Case]:
    args = _linear_inputs(0, dtype, device, requires_grad, seed=7, lead=(2, 3))
    return [("N-D input (2, 3, 8)", args)]


def _conv_bn_inputs(size=4, dtype=torch.float32, device="cpu", requires_grad=False, seed=0,
                    training=True):  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    x = _away_from_zero((max(size // 2, 2), 3, 6, 6), dtype, device, g)
    w = _away_from_zero((4, 3, 3, 3), dtype, device, g)
    gamma = 1 + 0.1 * _away_from_zero((4,), dtype, device, g)
    beta = _away_from_zero((4,), dtype, device, g)
    params = tuple(_leaf(t, requires_grad) for t in (x, w, gamma, beta))
    if training:
        stats = (torch.zeros(4, dtype=dtype, device=device),
                 torch.ones(4, dtype=dtype, device=device))  # fmt: skip
    else:  # trained running statistics, as the cnn's validation sees them
        stats = (0.3 * _away_from_zero((4,), dtype, device, g),
                 0.5 + torch.rand(4, generator=g, dtype=torch.float64).to(device, dtype))
    # momentum, eps, then stride, padding, dilation as nn.Conv2d stores them, and groups.
    return (*params, *stats, training, 0.1, 1e-5, (1, 1), (1, 1), (1, 1), 1)


def _conv_bn_cases(dtype, device, requires_grad=False) -> list[Case]:
    args = _conv_bn_inputs(4, dtype, device, requires_grad, seed=8, training=False)
    return [("eval mode (training=False, running stats)", args)]


CONV_BN_SIGNATURE = (
    "conv_bn(x, weight, bn_weight, bn_bias, running_mean, running_var, training, momentum, eps, "
    "stride, padding, dilation, groups)"
)
OPS: dict[str, OpEntry] = {
    "activation": OpEntry(relu, torch.relu, _unary_inputs, "activation(x)", cases=_unary_cases),
    "linear": OpEntry(linear, F.linear, _linear_inputs, "linear(x, weight, bias)", (0, 1, 2),
                      _linear_cases),
    "legendre_p3": OpEntry(legendre_p3, legendre_p3_builtin, _unary_inputs, "legendre_p3(x)",
                           cases=_p3_cases),
    "conv_bn": OpEntry(fused_conv_bn2d, fused_conv_bn2d_builtin, _conv_bn_inputs,
                       CONV_BN_SIGNATURE, (0, 1, 2, 3), _conv_bn_cases),
}  # fmt: skip
