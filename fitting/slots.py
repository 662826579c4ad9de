"""The op slots, in one place: for each, our op, its built-in twin, the layer that calls it, the
task whose model does, the inputs it is called with; and which uses each optimizer makes of the
ops. The config (ops.*), the app (its ops and their pre-check), the card and the tests read it.

A slot's choice is `custom` (ours), `builtin` (the twin), `<module>:<name>` (pkgutil.resolve_name,
from the current dir or PYTHONPATH) or Hydra's `{_target_: <module>.<name>, _partial_: true, ...}`;
conf/task/*.yaml hands each to `op` through Hydra's instantiate.
"""

import functools
import hashlib
import inspect
import os
import pkgutil
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

import models.ops
from fitting.boundary import CannotRun, guarded
from models.layers import Activation, FusedConvBN2d, Linear
from models.poly3 import Poly3

# label, args, kwargs, must (else a difference there is a note: inputs no model passes)
Sample = tuple[str, tuple, dict, bool]
EDGES = {"x = 0, -0, ±1e-3, ±1.5": (0.0, -0.0, 1e-3, -1e-3, 1.5, -1.5),
         "x = ±inf, NaN": (torch.inf, -torch.inf, torch.nan)}


class OpRefused(ValueError):
    """An op its slot cannot use (it does not resolve, cannot run, or fails a use); one line."""


@dataclass(frozen=True)
class Slot:
    """One op slot: ours, its twin, who calls it and its sample inputs (requires_grad: trains)."""

    ours: Callable
    twin: Callable
    layer: type  # the module that calls it
    task: str  # conf/task/<task>.yaml: the smallest task whose model calls it (the card trains it)
    samples: Callable[..., list[Sample]]  # (dtype, device, big=False): big, the model's size


def _random(dtype, device) -> Callable[..., torch.Tensor]:
    """t(*shape, grad=True, scale=1, shift=0): seeded random values away from 0 (relu's kink)."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, grad=True, scale=1.0, shift=0.0):
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        return (shift + scale * (x + 0.1 * x.sign())).to(device, dtype).requires_grad_(grad)
    return t


def _elementwise(shapes: dict[str, tuple[int, ...]], sized: dict[str, tuple[int, ...]]
                 ) -> Callable:
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


SLOTS: dict[str, Slot] = {
    "linear": Slot(models.ops.linear, F.linear, Linear, "mlp", _linear_samples),
    "activation": Slot(models.ops.relu, torch.relu, Activation, "mlp", _elementwise(
        {"x, as the mlp calls it": (4, 8), "x 4-D, as in the cnn": (2, 3, 4, 4)},
        {"x (256, 64), as the mlp calls it": (256, 64)})),
    "conv_bn": Slot(models.ops.fused_conv_bn2d, models.ops.conv_bn_reference, FusedConvBN2d,
                    "cnn", _conv_bn_samples),
    "legendre_p3": Slot(models.ops.legendre_p3, models.ops.legendre_p3_reference, Poly3,
                        "poly3", _elementwise({"x, as poly3 calls it": (16,)},
                                              {"x (2000,), as poly3 calls it": (2000,)})),
}
# What an optimizer computes through the ops beyond training's forward and gradient: newton a
# Hessian by double backward, lm a Jacobian by forward AD (or by double backward where an op
# has no jvp). compile=true adds "compiles".
USES = {"gd": (), "sgd": (), "adam": (), "lbfgs": (), "newton": ("second_order",),
        "lm": ("forward_ad",)}


def uses(optimizer: str, compiled: bool = False) -> tuple[str, ...]:
    """The uses a run makes of its ops: training, what `optimizer` (a name) needs, compiles."""
    return ("training", *USES.get(optimizer, ()), *(("compiles",) if compiled else ()))


def op(slot: str, choice: Any) -> Callable:
    """The function `slot` runs for `choice` (the config's `_target_` for every op)."""
    if callable(choice):  # Hydra already built it from a {_target_: ..., _partial_: true} choice
        return choice
    if choice in ("custom", "builtin"):
        return SLOTS[slot].ours if choice == "custom" else SLOTS[slot].twin
    return load(str(choice))


def load(spec: str) -> Callable:
    """A user's op named `<module>:<name>`, imported from the current dir or PYTHONPATH; a
    torch.autograd.Function subclass as its `.apply`."""
    module, _, name = spec.partition(":")
    if not (module and name):
        raise ValueError("expected custom, builtin, <module>:<name> or "
                         "{_target_:<module>.<name>,_partial_:true,<arg>:<value>}")
    top, cwd = module.split(".")[0], os.getcwd()
    mine = next((p for p in (f"{top}.py", f"{top}/__init__.py") if os.path.isfile(p)), None)
    loaded = getattr(sys.modules.get(top), "__file__", None)
    if mine and loaded and not os.path.samefile(mine, loaded):  # the lab's package wins
        raise ValueError(f"{spec}: your {os.path.abspath(mine)} is hidden by the lab's package "
                         f"{top}; rename it (e.g. my_{top}.py) and name the new module")
    sys.path.insert(0, cwd)
    try:
        obj = pkgutil.resolve_name(spec)
    finally:
        sys.path.remove(cwd)
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return obj.apply
    if not callable(obj):
        raise ValueError(f"{spec}: {name} is a {type(obj).__name__}, not callable")
    return obj


def resolve(slot: str, choice: Any, key: str | None = None, device: Any = None) -> Callable:
    """The function a choice names, built as the config builds it (Hydra's instantiate of
    {_target_: fitting.slots.op, ...}); OpRefused, one line naming `key`, if it names none.
    On a CPU device, Triton kernels its module defines run under Triton's interpreter."""
    from hydra.utils import instantiate

    key = key or f"ops.{slot}={describe(choice)}"
    late = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
    if device is not None and torch.device(device).type == "cpu":  # read as @triton.jit runs
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        with guarded(first=True):  # importing the user's module runs its code
            fn = instantiate({"_target_": "fitting.slots.op", "slot": slot, "choice": choice})
    except Exception as err:  # noqa: BLE001  an import error, a bad _target_, the user's code
        partial = isinstance(choice, dict) and not choice.get("_partial_")
        raise OpRefused(f"{key}: {line(err)}" + "; add _partial_: true" * partial) from None
    if not callable(fn) or isinstance(fn, torch.Tensor):
        raise OpRefused(f"{key}: not a function; give _target_ and _partial_: true")
    if late and interpreted(fn):  # triton's own kernels (tl.sigmoid) were defined natively
        raise OpRefused(f"{key}: triton was imported before TRITON_INTERPRET=1 was set, so its "
                        "kernels cannot run on this CPU: TRITON_INTERPRET=1 python ...")
    return fn


def param_names(*fns: Callable) -> list[str]:
    """The positional parameter names of the first of `fns` that shows any (a Function: its
    forward's, less ctx; a torch.library op: the function it was made from)."""
    for fn in fns:
        while isinstance(fn, functools.partial):
            fn = fn.func
        owner, skip = getattr(fn, "__self__", None), 0
        if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
            fn, skip = owner.forward, owner.setup_context is torch.autograd.Function.setup_context
        try:
            params = list(inspect.signature(getattr(fn, "_init_fn", fn)).parameters.values())
        except (TypeError, ValueError):
            continue
        names = [p.name for p in params[skip:]
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if names:
            return names
    return []


def line(err: BaseException) -> str:
    """`Type: first line` of the innermost cause (the real one under a framework's rethrows);
    a CannotRun's own words."""
    frames = [f.filename for f in traceback.extract_tb(err.__traceback__)]
    while not isinstance(err, CannotRun) and (err.__cause__ or err.__context__):
        err = err.__cause__ or err.__context__
    if isinstance(err, CannotRun):
        return str(err)
    if "active drivers" in str(err):  # Triton's, where it finds no GPU
        return "Triton finds no GPU here: " + ("it needs one under its interpreter too" if
                                               os.environ.get("TRITON_INTERPRET") == "1" else
                                               "TRITON_INTERPRET=1 python ... runs its kernels "
                                               "on the CPU (set before they are defined)")
    lines = [s.strip() for s in str(err).splitlines() if s.strip()]
    where = next((f" ({s})" for s in lines if s.startswith("Caused by:")), "")  # dynamo's
    if any(f.endswith("triton/runtime/interpreter.py") for f in frames):
        where += " (inside Triton's interpreter, which does not run every kernel: try a GPU)"
    return f"{type(err).__name__}: {lines[0]}{where}"[:300] if lines else type(err).__name__


def describe(choice: Any) -> str:
    """A choice as one short text, e.g. torch.nn.functional.leaky_relu(negative_slope=0.1)."""
    if not isinstance(choice, dict):
        return str(choice)
    args = ", ".join(f"{k}={v}" for k, v in choice.items() if not str(k).startswith("_"))
    return f"{choice.get('_target_', '?')}({args})"


def _module(fn: Callable) -> types.ModuleType | None:
    """The module that defines `fn` (a partial's function, a Function's class)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    owner = getattr(fn, "__self__", None)  # a Function's .apply
    return sys.modules.get(getattr(owner if isinstance(owner, type) else fn, "__module__", ""))


def interpreted(fn: Callable) -> bool:
    """Whether fn runs Triton kernels under Triton's interpreter (TRITON_INTERPRET=1): its module,
    or one it imports or takes a name from, imports triton (torch's own, for compile, aside)."""
    if os.environ.get("TRITON_INTERPRET") != "1" or not (module := _module(fn)):
        return False
    near = [module, *(v if type(v) is types.ModuleType else sys.modules.get(
        str(getattr(v, "__module__", ""))) for v in vars(module).values())]
    return any(type(v) is types.ModuleType and v.__name__.split(".")[0] == "triton"
               for m in near if m and m.__name__.split(".")[0] != "torch" for v in vars(m).values())


def source(fn: Callable) -> dict[str, str] | None:
    """The file that defines `fn` and its sha256 (which version of a user's op ran), or None."""
    path = getattr(_module(fn), "__file__", None)
    if not path or not os.path.isfile(path) or path.startswith(os.path.dirname(torch.__file__)):
        return None  # not a file of the user's
    with open(path, "rb") as f:
        return {"file": os.path.abspath(path), "sha256": hashlib.sha256(f.read()).hexdigest()}
