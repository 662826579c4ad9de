"""The op slots, in one place: for each, our op, its built-in twin, the layer that calls it, the
inputs it is called with; and which uses each optimizer makes of the ops. The config (ops.*),
the app (its ops and their pre-check), the card and the tests read it; a task declares the slots
its model calls (fitting.tasks).

A slot's choice is `custom` (ours), `builtin` (the twin), `<module>:<name>` (pkgutil.resolve_name,
from the current dir or PYTHONPATH) or Hydra's `{_target_: <module>.<name>, _partial_: true, ...}`;
fitting.run resolves each once (fitting.opcheck.boundary.resolve, inside the boundary).
"""

import hashlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

import models.ops
from models.forecast import Attention, Block, Forecaster
from models.layers import Activation, FusedConvBN2d, Linear, RMSNorm
from models.poly3 import Poly3

# label, args, kwargs, must (else a difference there is a note: inputs no model passes)
Sample = tuple[str, tuple, dict, bool]
EDGES = {"x = 0, -0, ±1e-3, ±1.5": (0.0, -0.0, 1e-3, -1e-3, 1.5, -1.5),
         "x = ±inf, NaN": (torch.inf, -torch.inf, torch.nan)}


@dataclass(frozen=True)
class Slot:
    """One op slot: ours, its twin, who calls it and its sample inputs (requires_grad: trains)."""

    ours: Callable
    twin: Callable
    layer: type  # the module that calls it
    samples: Callable[..., list[Sample]]  # (dtype, device, big=False): big, the model's size


def _random(dtype, device) -> Callable[..., torch.Tensor]:
    """t(*shape, grad=True, scale=1, shift=0): seeded random values away from 0 (relu's kink)."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, grad=True, scale=1.0, shift=0.0):
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        return (shift + scale * (x + 0.1 * x.sign())).to(device, dtype).requires_grad_(grad)
    return t


def _elementwise(shapes: dict[str, tuple[int, ...]], sized: dict[str, tuple[int, ...]]) -> Callable:
    """Samples of an elementwise op: x as each model calls it, then the edge values; with `big`,
    x at the size the model calls it (what the card's cost row times)."""
    def samples(dtype, device, big: bool = False) -> list[Sample]:
        t = _random(dtype, device)
        made = [(label, (t(*shape),), {}, True)
                for label, shape in (sized if big else shapes).items()]
        edges = [(k, (torch.tensor(v, dtype=dtype, device=device, requires_grad=True),), {}, True)
                 for k, v in EDGES.items()]
        return made + edges * (not big)
    return samples


def _linear_samples(dtype, device, big: bool = False) -> list[Sample]:
    t = _random(dtype, device)
    if big:
        return [("x (256, 64), as the mlp calls it", (t(256, 64), t(64, 64), t(64)), {}, True)]
    return [("x 2-D, as the models call it", (t(4, 8), t(5, 8), t(5)), {}, True),
            ("x N-D (2, 3, 8), which no model passes", (t(2, 3, 8), t(5, 8), t(5)), {}, False)]


def _conv_bn_samples(dtype, device, big: bool = False) -> list[Sample]:
    t = _random(dtype, device)
    if big:  # the cnn's first block, a batch of 64 images
        return [("x (64, 1, 32, 32), as the cnn calls it", (
            t(64, 1, 32, 32), t(8, 1, 3, 3), t(8), t(8), t(8, grad=False, scale=0),
            t(8, grad=False, scale=0, shift=1), True, 0.1, 1e-5, (1, 1), (1, 1), (1, 1), 1), {},
            True)]
    stats = {"training": (t(2, grad=False, scale=0), t(2, grad=False, scale=0, shift=1)),
             "eval": (t(2, grad=False, scale=0.3), t(2, grad=False, scale=0.1, shift=1))}
    return [(f"{mode} mode", (t(2, 1, 3, 3), t(2, 1, 3, 3), t(2, scale=0.1, shift=1), t(2), *s,
                              mode == "training", 0.1, 1e-5, (1, 1), (1, 1), (1, 1), 1), {}, True)
            for mode, s in stats.items()]


def transformer_inputs(slot: str, dtype, device, batch: int = 32, tokens: int = 64,
                       width: int = 64, heads: int = 4, vocab: int = 4096) -> tuple:
    """A forecast op's arguments at these sizes (by default the task's), seeded; those that
    train require grad."""
    t, head = _random(dtype, device), width // heads
    target = torch.randint(vocab, (batch * tokens,), generator=torch.Generator().manual_seed(0))
    return {"norm": lambda: (t(batch, tokens, width), t(width, scale=0.2, shift=1), 1e-6),
            "glu": lambda: (t(batch, tokens, 4 * width), t(batch, tokens, 4 * width)),
            "rope": lambda: (t(batch, heads, tokens, head), *(
                c.to(device, dtype) for c in models.ops.rope_tables(tokens, head))),
            "attention": lambda: tuple(t(batch, heads, tokens, head) for _ in range(3)),
            "cross_entropy": lambda: (t(batch * tokens, width), t(vocab, width),
                                      target.to(device))}[slot]()


def _transformer_samples(slot: str) -> Callable:
    """Samples of a forecast op: tiny, or (big) at the task's sizes."""
    def samples(dtype, device, big: bool = False) -> list[Sample]:
        sizes = {} if big else {"batch": 2, "tokens": 5, "width": 8, "heads": 2, "vocab": 10}
        label = "32 x 64 tokens, as the forecast task calls it" if big else "2 x 5 tokens"
        return [(label, transformer_inputs(slot, dtype, device, **sizes), {}, True)]
    return samples


SLOTS: dict[str, Slot] = {
    "linear": Slot(models.ops.linear, F.linear, Linear, _linear_samples),
    "activation": Slot(models.ops.relu, torch.relu, Activation, _elementwise(
        {"x, as the mlp calls it": (4, 8), "x 4-D, as in the cnn": (2, 3, 4, 4)},
        {"x (256, 64), as the mlp calls it": (256, 64)})),
    "conv_bn": Slot(models.ops.fused_conv_bn2d, models.ops.conv_bn_reference, FusedConvBN2d,
                    _conv_bn_samples),
    "legendre_p3": Slot(models.ops.legendre_p3, models.ops.legendre_p3_reference, Poly3,
                        _elementwise({"x, as poly3 calls it": (16,)},
                                     {"x (2000,), as poly3 calls it": (2000,)})),
    "norm": Slot(models.ops.rms_norm, models.ops.rms_norm_reference, RMSNorm,
                 _transformer_samples("norm")),
    "glu": Slot(models.ops.swiglu, models.ops.swiglu_reference, Block,
                _transformer_samples("glu")),
    "rope": Slot(models.ops.rope, models.ops.rope_reference, Attention,
                 _transformer_samples("rope")),
    "attention": Slot(models.ops.attention, models.ops.attention_reference, Attention,
                      _transformer_samples("attention")),
    "cross_entropy": Slot(models.ops.linear_cross_entropy,
                          models.ops.linear_cross_entropy_reference, Forecaster,
                          _transformer_samples("cross_entropy")),
}
# What an optimizer computes through the ops beyond training's forward and gradient: newton a
# Hessian by double backward, lm a Jacobian by forward AD (or by double backward where an op
# has no jvp). compile=true adds "compiles".
USES = {"newton": ("second_order",), "lm": ("forward_ad",)}


def uses(optimizer: str, compiled: bool = False) -> tuple[str, ...]:
    """The uses a run makes of its ops: training, what `optimizer` (a name) needs, compiles."""
    return ("training", *USES.get(optimizer, ()), *(("compiles",) if compiled else ()))


def describe(choice: Any) -> str:
    """A choice as one short text, e.g. torch.nn.functional.leaky_relu(negative_slope=0.1)."""
    if not isinstance(choice, dict):
        return str(choice)
    args = ", ".join(f"{k}={v}" for k, v in choice.items() if not str(k).startswith("_"))
    return f"{choice.get('_target_', '?')}({args})"


def source(fn: Callable) -> dict[str, str] | None:
    """The file that defines `fn` and its sha256 (which version of a user's op ran), or None."""
    module = sys.modules.get(getattr(models.ops.unwrap(fn)[0], "__module__", ""))
    path = getattr(module, "__file__", None)
    if not path or not os.path.isfile(path) or path.startswith(os.path.dirname(torch.__file__)):
        return None  # not a file of the user's
    with open(path, "rb") as f:
        return {"file": os.path.abspath(path), "sha256": hashlib.sha256(f.read()).hexdigest()}
