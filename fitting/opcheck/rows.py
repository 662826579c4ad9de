"""The card's rows beyond fitting.ops' verdicts: gradcheck, torch.compile, torch.library.opcheck."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import torch

from fitting.slots import line
from fitting.verdict import (
    Finding,
    Sample,
    call_on,
    compare_runs,
    leaves_of,
    parts_of,
    run_op,
)

LIBRARY_OPS = (torch.library.CustomOpDef, type(torch.ops.aten.sin.default),
               type(torch.ops.aten.sin))


def _gradcheck(fn: Callable, parts) -> str | None:
    """Why torch.autograd.gradcheck (float64, fast mode) fails for fn, or None when it passes."""
    leaves = {p: t.double().requires_grad_() for p, t in leaves_of(parts).items()}

    def outputs(*values):
        return tuple(call_on(fn, parts, dict(zip(leaves, values, strict=True)), torch.float64))

    try:
        torch.autograd.gradcheck(outputs, tuple(leaves.values()), fast_mode=True)
    except Exception as err:
        names = list(leaves)
        return re.sub(r"input (\d+),?", lambda m: names[int(m[1])], line(err))
    return None


def gradcheck(fn: Callable, ref: Callable, sample: Sample, names: list[str]) -> Finding:
    """gradcheck of the op; a failure the reference shares (a surrogate gradient, e.g. a
    straight-through estimator) is the reference's contract, not wrong."""
    parts = parts_of(sample, names)
    why = _gradcheck(fn, parts)
    if why is None:
        return "pass", "gradcheck (float64): analytical = numerical gradient"
    if _gradcheck(ref, parts):
        return "same as the reference", f"gradcheck fails for the reference too: {why}"
    return "wrong", f"gradcheck (float64): {why}"


def compiles(fn: Callable, sample: Sample, names: list[str], tol, backend: str) -> Finding:
    """torch.compile(fullgraph=True): outputs and gradients as eager's."""
    parts, what = parts_of(sample, names), f"torch.compile(fullgraph=True, backend={backend})"
    torch.compiler.reset()
    try:
        got = run_op(torch.compile(fn, fullgraph=True, backend=backend), parts)
    finally:
        torch.compiler.reset()
    if len(got) == 2:
        return "unsupported", f"{what}: {line(got[1])}"
    bad = [text for s, text in compare_runs(fn, parts, got, run_op(fn, parts), tol) if s == "wrong"]
    return ("wrong", f"{what} differs from eager: {bad[0]}") if bad else ("pass",
                                                                           f"{what} as eager")


def library_opcheck(fn: Callable, sample: Sample) -> Finding:
    """torch.library.opcheck on a torch.library op, with the sample's arguments as they are."""
    kwargs = {}
    while isinstance(fn, functools.partial):
        fn, kwargs = fn.func, {**fn.keywords, **kwargs}
    if not isinstance(fn, LIBRARY_OPS):
        return "n/a", "not a torch.library op"

    def fresh(obj):
        if isinstance(obj, torch.Tensor):
            return obj.detach().clone().requires_grad_(obj.requires_grad)
        return type(obj)(fresh(o) for o in obj) if isinstance(obj, list | tuple) else obj

    try:
        kwargs |= {k: fresh(v) for k, v in sample[2].items()}
        found = torch.library.opcheck(fn, fresh(sample[1]), kwargs, raise_exception=False)
    except Exception as err:
        return "wrong", f"torch.library.opcheck raised {line(err)}"
    failed = {test: r for test, r in found.items() if r != "SUCCESS"}
    if not failed:
        return "pass", f"torch.library.opcheck: {', '.join(found)}"
    test, err = next(iter(failed.items()))
    return "wrong", f"torch.library.opcheck: {test} fails: {line(err)}"
