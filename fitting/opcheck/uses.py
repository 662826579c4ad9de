"""The card's row for each use a run makes of an op (fitting.slots.uses): training, second order
(newton), forward AD (lm), compiles. The pre-check runs its run's rows, the card all of them,
and torch.library.opcheck's row too."""

import math
import re
import warnings
from collections.abc import Callable

import torch

from fitting.opcheck.boundary import CannotRun, form, guarded, interpreted, line, param_names
from fitting.opcheck.verdict import (
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
from fitting.optim.derivatives import FreshForward, hessian, jacobian, jacobian_by_backward
from fitting.slots import SLOTS
from models.ops import unwrap

NEEDS = {"second_order": "optimizer=newton", "forward_ad": "optimizer=lm",
         "compiles": "compile=true"}
NAMES = {"training": "training", "second_order": "second order", "forward_ad": "forward AD",
         "compiles": "compiles"}
APPROX = 1 / 32  # relative (norms): an op this close approximates the twin (a quantizer's)
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
        got, want = run_op(fn, case.parts(), first=True), run_op(entry.twin, case.parts())
        if got.error and isinstance(got.error[1], CannotRun):
            raise CannotRun(f"{got.error[0]} on {case.samples[0][0]}: {line(got.error[1])}")
        if not (got.error or want.error or form(got.raw) != form(want.raw) or all(
                (g - w).norm() <= APPROX * w.norm()
                for g, w in zip(got.outs, want.outs, strict=True))):
            case.ref = fn  # it computes something else: it must run, differentiate, give what
            # the optimizer needs, as the models call it (else the twin, approximately or
            # exactly, says what differs: trains-the-same judges an approximation)
    return case


def _shifted(parts, s: int, step: float):
    """The sample with what trains a small step up (s = 1) or down (s = -1)."""
    def f(path, t):
        x = t.detach()
        return (x + s * step * x.abs().clamp_min(1)).requires_grad_() if t.requires_grad else t
    return [(n, remap(v, f, n), kw) for n, v, kw in parts]


ONCE = "backward runs once per forward (a second backward through one graph fails): the checks " \
       "that need several backward passes ran a fresh forward for each"
SURROGATE = "its gradient is not its forward's derivative (a straight-through or surrogate " \
            "gradient?)"


def _once(fn: Callable, parts) -> bool:
    """Whether fn's backward runs once per forward: a second one through its graph raises."""
    leaves = {p: t.requires_grad_() for p, t in leaves_of(parts).items()}
    with guarded():
        loss = sum((o * incoming(o, k)).sum() for k, o in enumerate(call_on(fn, parts, leaves)))
        for n in range(2):
            try:
                torch.autograd.grad(loss, list(leaves.values()), retain_graph=True,
                                    allow_unused=True)
            except Exception:  # noqa: BLE001  the first: the training row says what fails
                return n == 1
    return False


def _precision(fn: Callable, parts) -> torch.dtype:
    """float32 where fn computes or returns float32 on float64 inputs (its values float32's on
    inputs float32 cannot hold), else float64: the precision its checks run at."""
    params = {p: t.double() * (1 + math.pi * 1e-9) for p, t in leaves_of(parts).items()}
    with guarded(), torch.no_grad():
        outs = call_on(fn, parts, params, torch.float64)
    low = any(o.dtype != torch.float64 for o in outs) or all(
        torch.equal(o, o.float().double()) and not torch.equal(o, o.round()) for o in outs)
    return torch.float32 if low and outs else torch.float64


def _check(check: Callable, fn: Callable, parts, dtype: torch.dtype = torch.float64) -> str | None:
    """Why torch.autograd.gradcheck or gradgradcheck (fast mode; in `dtype`, with a step and
    tolerances for float32 there) fails, or None."""
    leaves = {p: t.to(dtype).requires_grad_() for p, t in leaves_of(parts).items()}
    names = list(leaves)

    def outputs(*values):
        return tuple(call_on(fn, parts, dict(zip(leaves, values, strict=True)), dtype))

    try:
        f = (lambda *v: FreshForward.apply(outputs, *v)) if check is torch.autograd.gradcheck and \
            _once(fn, parts) else outputs
        loose = {} if dtype == torch.float64 else {"eps": 1e-3, "atol": 1e-3, "rtol": 1e-2}
        with guarded(), warnings.catch_warnings(action="ignore"):  # gradcheck's on float32
            check(f, tuple(leaves.values()), fast_mode=True, **loose)
    except CannotRun:
        raise
    except Exception as err:
        return re.sub(r"input (\d+),?", lambda m: names[int(m[1])] if int(m[1]) < len(names)
                      else "the incoming gradient", line(err))
    return None


def _consistent(check: Callable, case: Case, what: str) -> Finding:
    """Numerical against analytical derivatives of the op itself on the first sample, at its own
    precision; a failure the reference shares (at a kink, a surrogate gradient) is not wrong;
    without a contract, a first-order failure is a note (SURROGATE)."""
    parts, dtype = case.parts(), _precision(case.fn, case.parts())
    what = f"{what} ({str(dtype).removeprefix('torch.')})"
    if (why := _check(check, case.fn, parts, dtype)) is None:
        return "pass", f"{what}: analytical = numerical"
    if case.ref is not case.fn and _check(check, case.ref, parts, dtype):
        return "same as the reference", f"{what} fails for the reference too: {why}"
    if case.ref is case.fn and check is torch.autograd.gradcheck:
        return "note", f"{SURROGATE}: {what} fails: {why}"
    return "wrong", f"{what}: {why}"


def training(case: Case, backend: str = "") -> list[Finding]:
    """Forward and gradients against the reference's; gradcheck of the op."""
    found, parts = judge_training(case), case.parts()
    if _once(case.fn, parts):
        found.append(("note", ONCE))
    if (dtype := _precision(case.fn, parts)) != torch.float64:
        found.append(("note", f"it computes in {str(dtype).removeprefix('torch.')} on float64 "
                              "inputs: its checks ran at that precision, the reference's too"))
    return [*found, _consistent(torch.autograd.gradcheck, case, "gradcheck")]


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
    status, text = _consistent(torch.autograd.gradgradcheck, case, "gradgradcheck")
    if status == "wrong" and not h.any():  # what torch gives, silently, for a backward it cannot
        return [("unsupported", "its hessian is all zeros: its backward is not differentiable "
                                "(once_differentiable, or not torch ops)")]
    return [(status, f"hessian (what optimizer=newton runs) runs; {text}" if status == "pass"
             else text)]


def _backward_jacobian(fn: Callable, parts) -> torch.Tensor:
    """The (outputs, inputs that train) Jacobian by the op's backward (reverse mode)."""
    with guarded():
        return jacobian_by_backward(lambda p: torch.cat([o.reshape(-1) for o in
                                                         call_on(fn, parts, p)]), leaves_of(parts))


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
            with guarded(first=True):  # it compiles
                got = run_op(torch.compile(case.fn, fullgraph=fullgraph, backend=backend), parts,
                             first=True)
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
            else ("pass", f"{what} as eager"), *(("note", f"a graph break: {t}") for _, t in found)]


def library_opcheck(fn: Callable, sample: Sample) -> Finding:
    """torch.library.opcheck on a torch.library op, with the sample's arguments as they are."""
    fn, kwargs = unwrap(fn)
    if not isinstance(fn, LIBRARY_OPS):
        return "n/a", "not a torch.library op"

    def fresh(obj):
        return remap(obj, lambda _, t: t.detach().clone().requires_grad_(t.requires_grad), "")

    try:
        kwargs |= {k: fresh(v) for k, v in sample[2].items()}
        with guarded(first=True):  # its test_aot_dispatch_dynamic compiles
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
    """The findings of each of `uses`; a row other than training that cannot run says so, and
    the others still answer (CannotRun: the op cannot run as its models call it)."""
    return {use: row(ROWS[use], case, backend, must=use == "training") for use in uses}


def row(f: Callable, *args, must: bool = False) -> list[Finding]:
    """A row's findings, or `cannot run` and why in one line, never a traceback (`must`: the op
    cannot run as its models call it, CannotRun, is the caller's)."""
    try:
        found = f(*args)
    except Exception as err:  # noqa: BLE001  a CannotRun, or an error no check foresaw
        if must and isinstance(err, CannotRun):
            raise
        return [("cannot run", line(err))]
    return found if isinstance(found, list) else [found]
