"""Ops with no slot (`python -m fitting.opcheck any SPEC --ref REF`): their sample inputs,
from `--shape 64,8` (one tensor) or `--inputs module:fn`, a function returning a list of
`(args, kwargs)` pairs in the spirit of PyTorch's OpInfo sample inputs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch

from fitting.opcheck.subject import Case
from models.ops.choice import OpEntry, OpSpecError
from models.ops.guard import OpAborted, call_guarded
from models.ops.spec import load_callable, one_line, split_spec

Sample = tuple[tuple, dict]


def shape_samples(text: str) -> list[Sample]:
    """One sample: a tensor of the shape `64,8`, values away from 0."""
    try:
        shape = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise OpSpecError(f"--shape {text}: expected sizes separated by commas, e.g. 64,8"
                          ) from None  # fmt: skip
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return [((x + 0.1 * x.sign(),), {})]


def load_samples(spec: str, timeout: float) -> list[Sample]:
    """The samples `--inputs module:fn` returns: a non-empty list of (args, kwargs) pairs."""
    key = f"--inputs {spec}"
    fn, _, _ = load_callable(key, *split_spec(key, spec, "--inputs my_ops:samples"))
    try:
        samples = call_guarded(fn, timeout=timeout)
    except OpAborted as err:
        raise OpSpecError(f"{key}: {err}") from None
    except Exception as err:
        raise OpSpecError(f"{key}: calling it raised {one_line(err)}") from None
    ok = isinstance(samples, list | tuple) and samples and all(
        isinstance(p, tuple | list) and len(p) == 2 and isinstance(p[0], tuple | list)
        and isinstance(p[1], dict) for p in samples
    )  # fmt: skip
    if not ok:
        raise OpSpecError(f"{key}: expected a non-empty list of (args, kwargs) pairs, e.g. "
                          "[((x,), {'dim': 1})]")  # fmt: skip
    return [(tuple(a), dict(k)) for a, k in samples]


def _floating(args: tuple) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(args)
                 if isinstance(a, torch.Tensor) and a.is_floating_point())  # fmt: skip


def _cast(args: tuple, dtype, device, requires_grad: bool) -> tuple:
    """Floating tensors to dtype (new leaves), other tensors to the device."""
    floating = _floating(args)
    return tuple(
        a.detach().to(device, dtype).clone().requires_grad_(requires_grad) if i in floating
        else a.to(device) if isinstance(a, torch.Tensor) else a
        for i, a in enumerate(args)
    )  # fmt: skip


def _names(fn: Callable, n: int) -> tuple[str, ...]:
    while isinstance(fn, functools.partial):
        fn = fn.func
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]  # fmt: skip
    except (TypeError, ValueError):
        params = []
    return tuple(params[i] if i < len(params) else f"args[{i}]" for i in range(n))


def any_entry(fn: Callable, ref: Callable, samples: list[Sample], device: torch.device,
              dtype: torch.dtype) -> tuple[OpEntry, list[Case]]:  # fmt: skip
    """An OpEntry for an op with no slot (sample 0 is its reference input, its kwargs bound)
    and the card's cases: a non-contiguous first input, then every other sample."""
    (args0, kw0), rest = samples[0], samples[1:]
    diff = _floating(args0)
    for i, (args, _) in enumerate(rest, 1):
        if _floating(args) != diff:
            raise OpSpecError(f"--inputs: sample {i} has floating tensors at positions "
                              f"{_floating(args)}, sample 0 at {diff}; give every sample the "
                              "same kinds of arguments")  # fmt: skip

    def inputs(size=0, dtype=torch.float32, device=device, requires_grad=False, seed=0):
        return _cast(args0, dtype, device, requires_grad)

    def cases(dtype, device, requires_grad=False):
        x = args0[0] if diff and diff[0] == 0 else None
        if x is None or x.dim() < 2:
            return []
        base = _cast((x.mT,), dtype, device, requires_grad)[0]
        return [("a non-contiguous first input", (base.mT, *inputs(0, dtype, device,
                                                                   requires_grad)[1:]))]

    names = _names(fn, len(args0))
    label = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "op")
    bound_fn, bound_ref = functools.partial(fn, **kw0), functools.partial(ref, **kw0)
    entry = OpEntry(bound_fn, bound_ref, inputs, f"{label}({', '.join(names)})", diff, cases)
    extra = [(f"sample {i} {kw}" if kw else f"sample {i}", _cast(a, dtype, device, True),
              functools.partial(fn, **kw), functools.partial(ref, **kw))
             for i, (a, kw) in enumerate(rest, 1)]  # fmt: skip
    return entry, extra
