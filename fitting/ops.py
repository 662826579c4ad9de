"""Op slots: a choice (custom | builtin | module:name | Hydra's _target_ dict) -> the callable a
model runs, and the pre-check of a user's op: the card's training row (fitting.verdict)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

import models.ops
from fitting.verdict import (
    NEEDS,
    RANK,
    CannotRun,
    Sample,
    judge_derivatives,
    judge_training,
    line,
    param_names,
    parts_of,
    run_op,
)

SLOTS: dict[str, tuple[Callable, Callable]] = {  # slot -> (ours, the built-in twin)
    "linear": (models.ops.linear, F.linear), "activation": (models.ops.relu, torch.relu),
    "conv_bn": (models.ops.fused_conv_bn2d, models.ops.conv_bn_reference),
    "legendre_p3": (models.ops.legendre_p3, models.ops.legendre_p3_reference),
}
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-3),
       torch.bfloat16: (1.6e-2, 1e-2)}  # rtol, atol: room for a different but right formula


class OpChoiceError(ValueError):
    """An op choice that cannot run in its slot; the message is one line."""


def resolve_op(slot: str, choice: str | Mapping, key: str | None = None) -> Callable:
    """The callable `choice` names: custom, builtin, <module>:<name>, or a _target_ mapping."""
    key = key or f"ops.{slot}={describe_op(choice)}"
    if isinstance(choice, Mapping):
        from hydra.utils import instantiate

        partial = "" if choice.get("_partial_") else "; add _partial_: true"  # a call, not a fn
        target = str(choice.get("_target_", ""))
        fn = _from_cwd(key + partial, target, lambda: instantiate(choice)) if target else None
        if not callable(fn) or isinstance(fn, torch.Tensor):
            raise OpChoiceError(f"{key}: not a function; give _target_ and _partial_: true")
        return fn
    if choice in ("custom", "builtin") and slot in SLOTS:
        return SLOTS[slot][choice == "builtin"]
    module_name, _, name = str(choice).partition(":")
    if not (module_name and name):
        raise OpChoiceError(f"{key}: expected custom, builtin, <module>:<name> or "
                            "{_target_:<module>.<name>,_partial_:true,<arg>:<value>}")
    obj = _from_cwd(key, module_name, lambda: importlib.import_module(module_name))
    for part in name.split("."):
        if not hasattr(obj, part):
            hint = "; arguments: Hydra's {_target_:m.f,_partial_:true,k:v}" * ("(" in name)
            raise OpChoiceError(f"{key}: {module_name} ({getattr(obj, '__file__', module_name)}) "
                                f"has no {name!r}{hint}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return obj.apply
    if not callable(obj):
        raise OpChoiceError(f"{key}: {name} is a {type(obj).__name__}, not callable")
    return obj


def _from_cwd(key: str, module_name: str, load: Callable):
    """load() with the current directory on sys.path (train.py's own is its script's)."""
    top, cwd = module_name.split(".")[0], os.getcwd()
    mine = next((p for p in (f"{top}.py", f"{top}/__init__.py") if os.path.isfile(p)), None)
    loaded = getattr(sys.modules.get(top), "__file__", None)
    if mine and loaded and not os.path.samefile(mine, loaded):  # the lab's package wins
        raise OpChoiceError(f"{key}: your {os.path.abspath(mine)} is hidden by the lab's package "
                            f"{top}; rename it (e.g. my_{top}.py) and name the new module")
    sys.path.insert(0, cwd)
    try:
        return load()
    except (Exception, SystemExit) as err:
        key, _, hint = key.partition("; ")
        raise OpChoiceError(f"{key}: {module_name}: {line(err)}{'; ' * bool(hint)}{hint}") from None
    finally:
        sys.path.remove(cwd)


def describe_op(choice: str | Mapping) -> str:
    """Short text of a choice, e.g. torch.nn.functional.leaky_relu(negative_slope=0.1)."""
    if not isinstance(choice, Mapping):
        return str(choice)
    args = ", ".join(f"{k}={v}" for k, v in choice.items() if not str(k).startswith("_"))
    return f"{choice.get('_target_', '?')}({args})"


def slot_samples(slot: str, dtype: torch.dtype, device: torch.device | str) -> list[Sample]:
    """The inputs the models call `slot`'s op with (requires_grad marks what trains), and edges."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, grad=True, scale=1.0, shift=0.0):
        x = torch.randn(*shape, generator=g, dtype=torch.float64)  # away from relu's kink
        return (shift + scale * (x + 0.1 * x.sign())).to(device, dtype).requires_grad_(grad)

    if slot == "linear":
        return [("x 2-D, as the models call it", (t(4, 8), t(5, 8), t(5)), {}, True),
                ("x N-D (2, 3, 8), which no model passes", (t(2, 3, 8), t(5, 8), t(5)), {}, False)]
    if slot == "conv_bn":
        stats = {"training": (t(2, grad=False, scale=0), t(2, grad=False, scale=0, shift=1)),
                 "eval": (t(2, grad=False, scale=0.3), t(2, grad=False, scale=0.1, shift=1))}
        return [(f"{mode} mode", (t(2, 1, 3, 3), t(2, 1, 3, 3), t(2, scale=0.1, shift=1), t(2),
                 *s, mode == "training", 0.1, 1e-5, (1, 1), (1, 1), (1, 1), 1), {}, True)
                for mode, s in stats.items()]
    edges = {"x = 0, -0, ±1e-3, ±1.5": (0.0, -0.0, 1e-3, -1e-3, 1.5, -1.5),
             "x = ±inf, NaN": (torch.inf, -torch.inf, torch.nan)}
    return [(f"x, as {'poly3' if slot == 'legendre_p3' else 'the mlp'} calls it",
             (t(16) if slot == "legendre_p3" else t(4, 8),), {}, True),
            *([("x 4-D, as in the cnn", (t(2, 3, 4, 4),), {}, True)] if slot == "activation"
              else []),
            *((k, (torch.tensor(v, dtype=dtype, device=device, requires_grad=True),), {}, True)
              for k, v in edges.items())]


def computes_like(fn: Callable, ref: Callable, sample: Sample, names: list[str], tol) -> bool:
    """Whether fn's forward gives ref's values on the sample as models call it."""
    got, want = (run_op(f, parts_of(sample, names)) for f in (fn, ref))
    if len(got) == 2 or len(want) == 2:  # one raised: judge it against the twin, which says so
        return True
    return all(g.shape == w.shape and torch.allclose(g, w, *tol, equal_nan=True)
               for g, w in zip(got[2], want[2], strict=False))


def precheck(slot: str, fn: Callable, *, device: torch.device | str, dtype: torch.dtype,
             needs: tuple[str, ...] = (), key: str | None = None) -> None:
    """The card's training row (and the rows `needs` names) for a user's op in its slot;
    OpChoiceError (one line) when it is wrong, cannot run, or lacks what `needs` asks."""
    key, (ours, twin) = key or f"ops.{slot}", SLOTS[slot]
    samples, names, tol = slot_samples(slot, dtype, device), param_names(fn, twin, ours), TOL[dtype]
    # An op that computes the slot's op is judged against its twin; any other op (a silu in the
    # activation slot, say) is its own reference: it must run and differentiate as models call it.
    ref = twin if computes_like(fn, twin, samples[0], names, tol) else fn
    try:
        rows = {"training": judge_training(fn, ref, samples, names, tol)}
        rows |= {use: judge_derivatives(use, fn, ref, samples[0], names, tol) for use in needs}
    except CannotRun as err:
        raise OpChoiceError(f"{key}: {err}") from None
    for use, found in rows.items():
        status, text = max(found, key=lambda f: RANK.index(f[0]))
        if status in ("wrong", "unsupported"):
            also = f"; {NEEDS[use]} needs it" if use in NEEDS else ""
            raise OpChoiceError(f"{key}: {status} for {use.replace('_', ' ')}: {text}{also} "
                                f"(the card: python -m fitting.opcheck {slot} <your op>)")
