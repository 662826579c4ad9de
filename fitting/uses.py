"""The card's row for each use a run makes of an op (fitting.slots.uses): training, second order
(newton), forward AD (lm), compiles. The pre-check runs its run's rows, the card all of them,
and torch.library.opcheck's row too."""

import functools
import re
from collections.abc import Callable

import torch

from fitting.boundary import CannotRun, form, guarded
from fitting.optim.derivatives import hessian, jacobian
from fitting.slots import SLOTS, interpreted, line, param_names
from fitting.verdict import (
    TOL,
    Case,
    Finding,
    Sample,
    at,
    call_on,
    compare_runs,
    differ,
    how,
    incoming,
    judge_training,
    kinks,
    leaves_of,
    remap,
    run_op,
)

NEEDS = {"second_order": "optimizer=newton", "forward_ad": "optimizer=lm",
         "compiles": "compile=true"}
NAMES = {"training": "training", "second_order": "second order", "forward_ad": "forward AD",
         "compiles": "compiles"}
LIBRARY_OPS = (torch.library.CustomOpDef, type(torch.ops.aten.sin.default),
               type(torch.ops.aten.sin))


def slot_case(slot: str, fn: Callable, dtype: torch.dtype, device, ref: Callable | None = None
              ) -> Case:
    """fn in its slot, judged against `ref`; without one, against the slot's twin where fn
    computes the twin's values on the models' first sample, else against itself."""
    entry = SLOTS[slot]
    names = param_names(fn, *([ref] if ref else []), entry.twin, entry.ours)
    case = Case(fn, ref or entry.twin, entry.twin, entry.samples(dtype, device), names,
                TOL[dtype], f"the slot's op ({entry.twin.__name__})")
    if ref is None:
        got, want = run_op(fn, case.parts()), run_op(entry.twin, case.parts())
        if got.error and isinstance(got.error[1], CannotRun):
            raise CannotRun(f"{got.error[0]} on {case.samples[0][0]}: {line(got.error[1])}")
        if not (got.error or want.error or form(got.raw) != form(want.raw) or all(
                torch.allclose(g, w, *case.tol, equal_nan=True)
                for g, w in zip(got.outs, want.outs, strict=True))):
            case.ref = fn  # it computes something else: it must run, differentiate, give what
            # the optimizer needs, as the models call it (else the twin says what is wrong)
    return case


def _shifted(parts, s: int, step: float):
    """The sample with what trains a small step up (s = 1) or down (s = -1)."""
    def f(path, t):
        x = t.detach()
        return (x + s * step * x.abs().clamp_min(1)).requires_grad_() if t.requires_grad else t
    return [(n, remap(v, f, n), kw) for n, v, kw in parts]


def _in_float32(fn: Callable, parts) -> bool:
    """Whether fn computes in float32 on float64 inputs (most Triton kernels do): its outputs are
    float32, or float32 values, on inputs that are not, and not because it is flat (a rounding)."""
    moved = {p: t.double() * (1 + 1e-9) for p, t in leaves_of(parts).items()}
    with guarded():
        outs = call_on(fn, parts, moved, torch.float64)
    return bool(outs) and all(torch.equal(o.double(), o.float().double()) for o in outs) \
        and not _flat(fn, parts)


def _check(check: Callable, fn: Callable, parts, coarse: bool = False) -> str | None:
    """Why torch.autograd.gradcheck or gradgradcheck (float64, fast mode; `coarse`: with float32's
    step and tolerance, 1e-3) fails, or None."""
    leaves = {p: t.double().requires_grad_() for p, t in leaves_of(parts).items()}
    names = list(leaves)

    def outputs(*values):
        return tuple(o.double() for o in call_on(fn, parts, dict(zip(leaves, values, strict=True)),
                                                 torch.float64))

    try:
        with guarded():
            check(outputs, tuple(leaves.values()), fast_mode=True,
                  **({"eps": 1e-3, "atol": 1e-3, "rtol": 1e-3} if coarse else {}))
    except CannotRun:
        raise
    except Exception as err:
        return re.sub(r"input (\d+),?", lambda m: names[int(m[1])] if int(m[1]) < len(names)
                      else "the incoming gradient", line(err))
    return None


def _flat(fn: Callable, parts) -> bool:
    """Whether fn's forward is flat on the sample (a quantizer's: a rounding, a sign)."""
    with guarded():
        a, b = (call_on(fn, p, {}, torch.float64) for p in (parts, _shifted(parts, 1, 1e-6)))
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _consistent(check: Callable, case: Case, what: str) -> Finding:
    """Numerical against analytical derivatives of the op itself on the first sample; a failure
    the reference shares (at a kink, or a surrogate gradient) is not wrong."""
    parts = case.parts()
    if coarse := _in_float32(case.fn, parts):  # judged at its own precision
        what += " at float32's precision: it computes in float32"
    if (why := _check(check, case.fn, parts, coarse)) is None:
        return "pass", f"{what}: analytical = numerical"
    if case.ref is not case.fn and _check(check, case.ref, parts):
        return "same as the reference", f"{what} fails for the reference too: {why}"
    if case.ref is case.fn and _flat(case.fn, parts):
        return "note", f"{what} fails: its forward is flat on the sample, so its gradient is a " \
                       f"surrogate (a straight-through estimator); --ref states it: {why}"
    return "wrong", f"{what}: {why}"


def training(case: Case, backend: str = "") -> list[Finding]:
    """Forward and gradients against the reference's; gradcheck of the op."""
    found = judge_training(case)
    return [*found, _consistent(torch.autograd.gradcheck, case, "gradcheck (float64)")]


def _derivative(use: str, fn: Callable, parts):
    """derivatives.hessian of a squared output (as newton) or .jacobian (as lm), or the error."""
    leaves = leaves_of(parts)
    try:
        with guarded():
            if use == "second_order":
                ps = {p: t.requires_grad_() for p, t in leaves.items()}
                return hessian(lambda: sum((o * incoming(o, k)).square().sum() for k, o in
                                           enumerate(call_on(fn, parts, ps))), list(ps.values()))
            return jacobian(lambda p: torch.cat([o.reshape(-1) for o in
                                                 call_on(fn, parts, p or leaves)]), leaves)
    except CannotRun:
        raise
    except Exception as err:
        return err


def second_order(case: Case, backend: str = "") -> list[Finding]:
    """newton's Hessian runs; gradgradcheck: numerical against analytical second derivatives."""
    if isinstance(h := _derivative("second_order", case.fn, case.parts()), Exception):
        return [("unsupported", f"its hessian fails: {line(h)}")]
    status, text = _consistent(torch.autograd.gradgradcheck, case, "gradgradcheck (float64)")
    if status == "wrong" and not h.any():  # what torch gives, silently, for a backward it cannot
        return [("unsupported", "its hessian is all zeros: its backward is not differentiable "
                                "(once_differentiable, or not torch ops)")]
    return [(status, f"hessian (what optimizer=newton runs) runs; {text}" if status == "pass"
             else text)]


def _backward_jacobian(fn: Callable, parts) -> torch.Tensor:
    """The (outputs, inputs that train) Jacobian by reverse mode: the op's backward."""
    leaves = leaves_of(parts)

    def f(*values):
        return torch.cat([o.reshape(-1) for o in call_on(fn, parts, dict(zip(leaves, values,
                                                                              strict=True)))])

    with guarded():
        js = torch.autograd.functional.jacobian(f, tuple(leaves.values()))
    return torch.cat([j.reshape(j.shape[0], -1) for j in js], dim=1)


def forward_ad(case: Case, backend: str = "") -> list[Finding]:
    """lm's Jacobian by forward AD against the op's own backward's; at a kink, a note."""
    parts = case.parts()
    if isinstance(got := _derivative("forward_ad", case.fn, parts), Exception):
        return [("unsupported", f"its jacobian by forward AD fails: {line(got)}")]
    want = _backward_jacobian(case.fn, parts)
    if not (bad := differ(got, want, case.tol)):
        return [("pass", "jacobian (what optimizer=lm runs) by forward AD as by its backward")]
    if not got.any():
        return [("unsupported", "its jacobian by forward AD is all zeros, by its backward not: "
                                "no jvp reaches it (a torch.library op drops tangents)")]
    r, c = divmod(bad[0], got.shape[1])
    entries = [at(p, t, j, False) for p, t in leaves_of(parts).items() for j in range(t.numel())]
    where = f"d out[{r}]/d {entries[c]}"
    sides = [_backward_jacobian(case.fn, _shifted(parts, s, 1e-6)) for s in (-1, 1)]
    if kinks(got, *sides, bad).all():
        return [("note", f"jacobian at {where}: {got.reshape(-1)[bad[0]]:.6g} by forward AD, "
                         f"{want.reshape(-1)[bad[0]]:.6g} by its backward: a kink, both between "
                         f"the one-sided derivatives ({len(bad)} such entries)")]
    return [("wrong", f"jacobian at {where}: by forward AD vs by its backward "
                      f"{how(got, want, bad, case.tol)}")]


def compiles(case: Case, backend: str = "aot_eager") -> list[Finding]:
    """torch.compile: outputs and gradients as eager's; a graph break (fullgraph=True fails,
    torch.compile as compile=true runs it works) is a note."""
    parts, found = case.parts(), []
    if interpreted(case.fn):
        return [("note", "not checked under Triton's interpreter (TRITON_INTERPRET=1)")]
    for fullgraph in (True, False):
        what = f"torch.compile(fullgraph={fullgraph}, backend={backend})"
        torch.compiler.reset()
        try:
            with guarded(first=True):
                got = run_op(torch.compile(case.fn, fullgraph=fullgraph, backend=backend), parts)
        finally:
            torch.compiler.reset()
        if got.error and isinstance(got.error[1], CannotRun):
            raise CannotRun(f"compiled, {got.error[0]}: {got.error[1]}")
        if not got.error:
            break
        found.append(("unsupported" if fullgraph is False else "note",
                      f"{what}: {line(got.error[1])}"))
    if got.error:
        return found[1:]
    bad = [t for s, t in compare_runs(case.fn, parts, got, run_op(case.fn, parts), case.tol)
           if s == "wrong"]
    return [("wrong", f"{what} differs from eager: {bad[0]}") if bad
            else ("pass", f"{what} as eager"), *(("note", f"a graph break: {t}")
                                                for _, t in found)]


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


ROWS = {"training": training, "second_order": second_order, "forward_ad": forward_ad,
        "compiles": compiles}


def judge(case: Case, uses: tuple[str, ...], backend: str = "aot_eager"
          ) -> dict[str, list[Finding]]:
    """The findings of each of `uses` (CannotRun: the op cannot run)."""
    return {use: ROWS[use](case, backend) for use in uses}
