"""The card's compiler checks: torch.compile(fullgraph=True) and torch.library.opcheck."""

from __future__ import annotations

import torch

from fitting.opcheck.checks import Check, Subject, compare, line
from models.ops import LegendreP3NumPy


def _run(s: Subject, fn, args: tuple) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Output and gradients (for a fixed incoming gradient) of fn(*args)."""
    out = fn(*args)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    return out, list(torch.autograd.grad(out, s.diff(args), grad_out.to(out.device)))


def _matches(s: Subject, fn) -> tuple[bool, str]:
    """Run `fn` and the eager op on fresh float32 inputs and compare outputs and gradients."""
    dtype = torch.float32
    want = _run(s, s.fn, s.inputs(8, dtype, requires_grad=True))
    got = _run(s, fn, s.inputs(8, dtype, requires_grad=True))
    pairs = zip([got[0], *got[1]], [want[0], *want[1]], strict=True)
    results = [compare(g, w, dtype) for g, w in pairs]
    return next((r for r in results if not r[0]), results[0])


def compile_fullgraph(s: Subject) -> Check:
    """torch.compile(fullgraph=True): no graph break, same output and gradients as eager.

    A graph break is a skip: the app's compile=true still runs such an op, in pieces. Failing to
    compile at all, or compiled results that differ from eager, fail."""
    name = f"torch.compile fullgraph ({s.backend})"
    torch.compiler.reset()
    try:
        ok, detail = _matches(s, torch.compile(lambda *a: s.fn(*a), fullgraph=True,
                                               backend=s.backend))
    except Exception as err:
        reason = line(err)
        torch.compiler.reset()
        try:
            ok, detail = _matches(s, torch.compile(lambda *a: s.fn(*a), backend=s.backend))
        except Exception as err2:
            return Check(name, "fail", f"does not compile: {line(err2)}")
        if not ok:
            return Check(name, "fail", f"graph break ({reason}), and compiled != eager: {detail}")
        return Check(name, "skip", f"graph break (compile=true still runs it, in pieces): {reason}")
    finally:
        torch.compiler.reset()
    if not ok:
        return Check(name, "fail", f"compiled != eager: {detail}")
    return Check(name, "pass", f"no graph break; compiled vs eager (fwd+bwd): {detail}")


# The op types torch.library.opcheck takes: what torch.library.custom_op returns, and
# torch.ops.* ops (an overload packet like torch.ops.aten.sin, or one overload like
# torch.ops.aten.sin.default), named through public objects (torch.library exports the first
# type by name only in recent releases).
_LIBRARY_OP_TYPES = (
    type(LegendreP3NumPy),
    type(torch.ops.aten.sin.default),
    type(torch.ops.aten.sin),
)


def _is_library_op(fn) -> bool:
    return isinstance(fn, _LIBRARY_OP_TYPES)


def library_opcheck(s: Subject) -> Check:
    """torch.library.opcheck when the op is a torch.library custom op; a skip otherwise."""
    name = "torch.library.opcheck"
    if not _is_library_op(s.fn):
        return Check(
            name, "skip",
            "not a torch.library custom op (name the object torch.library.custom_op returns "
            "to have its schema, fake kernel and autograd registration tested)",
        )  # fmt: skip
    try:
        results = torch.library.opcheck(
            s.fn, s.inputs(4, torch.float32, requires_grad=True), raise_exception=False
        )
    except Exception as err:
        return Check(name, "fail", f"raised {line(err)}")
    failed = {test: result for test, result in results.items() if result != "SUCCESS"}
    if failed:
        test, result = next(iter(failed.items()))
        why = result if isinstance(result, str) else line(result)
        return Check(name, "fail", f"{', '.join(failed)} failed; {test}: {why}")
    return Check(name, "pass", ", ".join(results))
