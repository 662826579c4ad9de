"""The card's compiler checks: torch.compile(fullgraph=True) and torch.library.opcheck."""

from __future__ import annotations

import functools

import torch

from fitting.opcheck.subject import Check, Subject, compare, line
from models.ops.capability import first_grads, is_library_op


def _run(s: Subject, fn, args: tuple) -> list[torch.Tensor]:
    """Output and gradients (for a fixed incoming gradient; zeros for a missing one)."""
    out = fn(*args)
    g = torch.Generator().manual_seed(3)
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.device, out.dtype)
    grads = first_grads(out, s.diff(args), grad_out)
    return [out, *(torch.zeros_like(a) if gr is None else gr
                   for a, gr in zip(s.diff(args), grads, strict=True))]  # fmt: skip


def _matches(s: Subject, fn) -> tuple[bool, str]:
    """Run `fn` and the eager op on fresh float32 inputs and compare outputs and gradients."""
    dtype = torch.float32
    want = _run(s, s.fn, s.inputs(8, dtype, requires_grad=True))
    got = _run(s, fn, s.inputs(8, dtype, requires_grad=True))
    results = [compare(g, w, s.tolerance(dtype)) for g, w in zip(got, want, strict=True)]
    return next((r for r in results if not r[0]), results[0])


def compile_fullgraph(s: Subject) -> Check:
    """torch.compile(fullgraph=True): no graph break, same output and gradients as eager.

    A graph break, or no compiling at all, is unsupported: the app's compile=true still runs
    such an op (in pieces, or eagerly). Compiled results that differ from eager are wrong."""
    name, use = f"torch.compile fullgraph ({s.backend})", "compile"
    torch.compiler.reset()
    try:
        ok, detail = _matches(s, torch.compile(lambda *a: s.fn(*a), fullgraph=True,
                                               backend=s.backend))  # fmt: skip
    except Exception as err:
        reason = line(err)
        torch.compiler.reset()
        try:
            ok, detail = _matches(s, torch.compile(lambda *a: s.fn(*a), backend=s.backend))
        except Exception as err2:
            return Check(name, "unsupported", f"does not compile: {line(err2)}", use)
        if not ok:
            return Check(name, "wrong", f"graph break ({reason}), and compiled != eager: "
                         f"{detail}", use)  # fmt: skip
        return Check(name, "unsupported", "graph break (compile=true still runs it, in pieces): "
                     f"{reason}", use)  # fmt: skip
    finally:
        torch.compiler.reset()
    if not ok:
        return Check(name, "wrong", f"compiled != eager: {detail}", use)
    return Check(name, "pass", f"no graph break; compiled vs eager (fwd+bwd): {detail}", use)


def library_opcheck(s: Subject) -> Check:
    """torch.library.opcheck when the op is a torch.library custom op; a skip otherwise."""
    name, use = "torch.library.opcheck", "library"
    if not is_library_op(s.fn):
        return Check(
            name, "skip",
            "not a torch.library custom op (name the object torch.library.custom_op returns "
            "to have its schema, fake kernel and autograd registration tested)", use,
        )  # fmt: skip
    op, kwargs = s.fn, {}
    if isinstance(op, functools.partial):
        op, kwargs = op.func, dict(op.keywords)
    try:
        results = torch.library.opcheck(
            op, s.inputs(4, torch.float32, requires_grad=True), kwargs, raise_exception=False
        )
    except Exception as err:
        return Check(name, "wrong", f"raised {line(err)}", use)
    failed = {test: result for test, result in results.items() if result != "SUCCESS"}
    if failed:
        test, result = next(iter(failed.items()))
        why = result if isinstance(result, str) else line(result)
        return Check(name, "wrong", f"{', '.join(failed)} failed; {test}: {why}", use)
    return Check(name, "pass", ", ".join(results), use)
