"""The card's row for torch.library ops: torch.library.opcheck."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from fitting.boundary import CannotRun, guarded
from fitting.slots import line
from fitting.verdict import Finding, Sample, remap

LIBRARY_OPS = (torch.library.CustomOpDef, type(torch.ops.aten.sin.default),
               type(torch.ops.aten.sin))


def library_opcheck(fn: Callable, sample: Sample) -> Finding:
    """torch.library.opcheck on a torch.library op, with the sample's arguments as they are."""
    kwargs = {}
    while isinstance(fn, functools.partial):
        fn, kwargs = fn.func, {**fn.keywords, **kwargs}
    if not isinstance(fn, LIBRARY_OPS):
        return "n/a", "not a torch.library op"

    def fresh(obj):
        return remap(obj, lambda _, t: t.detach().clone().requires_grad_(t.requires_grad), "")

    try:
        kwargs |= {k: fresh(v) for k, v in sample[2].items()}
        with guarded():
            found = torch.library.opcheck(fn, fresh(sample[1]), kwargs, raise_exception=False)
    except CannotRun:
        raise
    except Exception as err:
        return "wrong", f"torch.library.opcheck raised {line(err)}"
    failed = {test: r for test, r in found.items() if r != "SUCCESS"}
    if not failed:
        return "pass", f"torch.library.opcheck: {', '.join(found)}"
    test, err = next(iter(failed.items()))
    return "wrong", f"torch.library.opcheck: {test} fails: {line(err)}"
