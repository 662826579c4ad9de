"""The training row of an op against its reference, shared by the pre-check (precheck.py)
and the card (fitting.opcheck): forward and gradients against the reference's autograd, as
models call the op, on fresh copies; what it returns and what it does to its inputs; kinks and
non-finite values as notes. Every call of the op is guarded (boundary.py)."""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from fitting.opcheck.boundary import CannotRun, form, guarded, line
from fitting.slots import Sample

RANK = ("n/a", "measured", "pass", "same as the reference", "note", "unsupported", "wrong",
        "cannot run")
OFF = "beyond rtol"  # in the text of every value difference: what an approximate op differs by
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-3),
       torch.bfloat16: (1.6e-2, 1e-2)}  # rtol, atol: room for a different but right formula
Finding = tuple[str, str]  # (a RANK status, what was found)


@dataclass
class Case:
    """An op to judge: its reference (itself where none applies), what fixes the form of its
    output (the slot's twin, or the reference), its samples, parameter names and tolerance."""

    fn: Callable
    ref: Callable
    like: Callable
    samples: list[Sample]
    names: list[str]
    tol: tuple[float, float]
    contract: str = "the reference"  # who `like` is, in words

    def parts(self, n: int = 0) -> list[tuple[str, object, bool]]:
        """(name, value, keyword?) of each argument of sample n."""
        return parts_of(self.samples[n], self.names)


@dataclass
class OpCall:
    """One call and its backward: the copies that train, the other tensor arguments after the
    call, what it returned, its floating outputs, the gradients, the inputs it changed in place
    unknown to autograd, and (where, error) if it raised."""

    leaves: dict = field(default_factory=dict)
    rest: dict = field(default_factory=dict)
    raw: object = None
    outs: list = field(default_factory=list)
    grads: dict = field(default_factory=dict)
    changed: list = field(default_factory=list)
    error: tuple[str, BaseException] | None = None


def remap(obj, f: Callable, path: str):
    """obj (a tensor, or lists and tuples of them) with each tensor t replaced by f(its path, t)."""
    if isinstance(obj, torch.Tensor):
        return f(path, obj)
    if isinstance(obj, list | tuple):
        return type(obj)(remap(o, f, f"{path}[{i}]") for i, o in enumerate(obj))
    return obj


def tensors(obj, path: str) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) of every tensor in obj."""
    found = []
    remap(obj, lambda p, t: found.append((p, t)), path)
    return found


def parts_of(sample: Sample, names: list[str]) -> list[tuple[str, object, bool]]:
    """(name, value, keyword?) of each argument of the sample."""
    _, args, kwargs, _ = sample
    names = [*names[: len(args)], *(f"args[{i}]" for i in range(len(names), len(args)))]
    return [*((n, a, False) for n, a in zip(names, args, strict=True)),
            *((k, v, True) for k, v in kwargs.items())]


def call(fn: Callable, parts, f: Callable):
    """What fn returns, each tensor argument replaced by f(path, tensor)."""
    return fn(*(remap(v, f, n) for n, v, kw in parts if not kw),
              **{n: remap(v, f, n) for n, v, kw in parts if kw})


def floats(out) -> list[torch.Tensor]:
    """The floating tensors of an output."""
    return [t for _, t in tensors(out, "out") if t.is_floating_point()]


def incoming(t: torch.Tensor, k: int) -> torch.Tensor:
    """The fixed random incoming gradient of output k."""
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(k),
                       dtype=torch.float64).to(t.device, t.dtype)


def run_op(fn: Callable, parts, dtype=None, shift: dict | None = None, first: bool = False
           ) -> OpCall:
    """One guarded call and backward on fresh copies, what trains called as a non-leaf (as a
    model calls an op on activations); `first`: the op's first call, with its own time limit."""
    run, given = OpCall(), {}

    def fresh(path, t):
        c = t.detach().to(dtype if dtype and t.is_floating_point() else t.dtype, copy=True)
        if not t.requires_grad:
            given[path] = (c, None, None)
            return c
        run.leaves[path] = (c + (shift or {}).get(path, 0)).requires_grad_()
        x = run.leaves[path].clone()
        given[path] = (x, x.detach().clone(), x.grad_fn)
        return x

    try:
        with guarded(first):
            run.raw = call(fn, parts, fresh)
    except Exception as err:
        run.error = ("calling it", err)
        return run
    run.outs = floats(run.raw)
    run.changed = [(p, "forward") for p, (x, before, node) in given.items() if node and
                   x.grad_fn is node and not _same(x, before)]
    run.rest = {p: x.detach().clone() for p, (x, _, node) in given.items() if not node}
    after = {p: x.detach().clone() for p, (x, _, _) in given.items()}
    pairs = [(o, incoming(o, k)) for k, o in enumerate(run.outs) if o.requires_grad]
    try:
        with guarded(first):
            grads = torch.autograd.grad([o for o, _ in pairs], list(run.leaves.values()),
                                        [v for _, v in pairs], allow_unused=True) if pairs else ()
    except Exception as err:
        run.error = ("its backward", err)
        return run
    run.changed += [(p, "backward") for p, (x, _, _) in given.items() if not _same(x, after[p])]
    run.grads = dict(zip(run.leaves, [*grads, *[None] * len(run.leaves)], strict=False))
    return run


def _same(x: torch.Tensor, before: torch.Tensor) -> bool:
    return torch.allclose(x.detach(), before, 0, 0, equal_nan=True)  # NaN = NaN


def differ(got: torch.Tensor, want: torch.Tensor, tol) -> list[int]:
    """The flat indices where got and want differ beyond tol, worst first."""
    g, w = got.detach().double().reshape(-1), want.detach().double().reshape(-1)
    close = torch.isclose(g, w, *tol, equal_nan=True)
    err = torch.where(close, 0.0, (g - w).abs().nan_to_num(torch.inf))
    return err.argsort(descending=True)[: int((~close).sum())].tolist()


def how(got, want, bad: list[int], tol, i: int | None = None, scale=None) -> str:
    """`got vs want; n of N differ beyond rtol R, atol A` at entry i (default the worst)."""
    i = bad[0] if i is None else i
    g, w = (_item(t, i, scale) for t in (got, want))
    return f"{g:.6g} vs {w:.6g}; {len(bad)} of {got.numel()} differ {OFF} {tol[0]:g}, " \
        f"atol {tol[1]:g}"


def _item(t: torch.Tensor, i: int, scale=None) -> float:  # per unit incoming gradient (scale)
    return t.reshape(-1)[i].item() / (1.0 if scale is None else scale[i].item()) + 0.0


def at(path: str, t: torch.Tensor, i: int, value: bool = True) -> str:
    """`path[i, j]` of flat index i (`= value` with value)."""
    idx = ", ".join(str(int(k)) for k in torch.unravel_index(torch.tensor(i), t.shape))
    return f"{path}[{idx}]" + (f" = {t.reshape(-1)[i].item():g}" if value else "")


def kinks(got: torch.Tensor, side_a: torch.Tensor, side_b: torch.Tensor, bad: list[int]):
    """Which `bad` entries of got lie between the one-sided values a small step either side,
    where those differ (a kink: any value between them is a subgradient, right)."""
    a, b = side_a.detach().double().reshape(-1), side_b.detach().double().reshape(-1)
    lo, hi, g = a.minimum(b), a.maximum(b), got.detach().double().reshape(-1)
    slack = 1e-3 * (1 + lo.abs() + hi.abs())
    return ((hi - lo > slack) & (g >= lo - slack) & (g <= hi + slack))[bad]


def _gradient(ref, parts, path: str, leaf, got, want, tol, scale) -> list[Finding]:
    """A gradient that differs is wrong, unless only where the reference has a kink and there
    between its one-sided derivatives (its gradients a small step either side)."""
    if not (bad := differ(got, want, tol)):
        return []
    x = leaf.detach().double()
    sides = [run_op(ref, parts, torch.float64, {path: s * 1e-6 * x.abs().clamp_min(1)})
             for s in (-1, 1)] if x.isfinite().all() else []
    ok = torch.zeros(len(bad), dtype=torch.bool)
    if sides and not any(s.error for s in sides):
        ok = kinks(got, *(s.grads[path] for s in sides), bad)
    if not ok.all():
        i = bad[int((~ok).nonzero()[0])]
        return [("wrong", f"gradient of {path} at {at(path, leaf, i)}: "
                          f"{how(got, want, bad, tol, i, scale)}")]
    i, (a, b) = bad[0], (s.grads[path].reshape(-1).double() for s in sides)
    sided = sorted((_item(a, i, scale), _item(b, i, scale)))
    return [("note", f"at {at(path, leaf, i)} the reference has a kink (one-sided derivatives "
                     f"{sided[0]:.3g} and {sided[1]:.3g}): the gradient {_item(got, i, scale):.6g},"
                     f" the reference's {_item(want, i, scale):.6g}, both right ({len(bad)} such "
                     f"point{'s' * (len(bad) > 1)})")]


def compare_runs(ref, parts, got: OpCall, want: OpCall, tol) -> list[Finding]:
    """What differs between two runs (got: the op's, want: the reference's)."""
    found = [("wrong", f"it changes {p} in place without ctx.mark_dirty: autograd does not "
                       f"know, so what used {p} before gets wrong gradients") if when == "forward"
             else ("wrong", f"it changes {p} in place in its backward, behind autograd's back: "
                            f"every later use of {p} gets the changed values")
             for p, when in got.changed]
    if [(o.shape, o.dtype) for o in got.outs] != [(o.shape, o.dtype) for o in want.outs]:
        return [*found, ("wrong", f"returns {form(got.raw)}, the reference {form(want.raw)}")]
    x = next(iter(got.leaves.items()), None)
    for k, (o, w) in enumerate(zip(got.outs, want.outs, strict=True)):
        if bad := differ(o, w, tol):
            name = "out" if len(got.outs) == 1 else f"out[{k}]"
            where = at(*x, bad[0]) if x and x[1].shape == o.shape else at(name, o, bad[0], False)
            found.append(("wrong", f"forward at {where}: {how(o, w, bad, tol)}"))
    for path, t in got.rest.items():
        if bad := differ(t, want.rest[path], tol):
            found.append(("wrong", f"{path} after the call: {how(t, want.rest[path], bad, tol)}"))
    if any(o.requires_grad for o in want.outs) and not any(o.requires_grad for o in got.outs):
        return [*found, ("wrong", "its output does not require grad, so nothing before it trains")]
    found += [("wrong", f"no gradient for {p}, so {p} would never train (a detached copy?)")
              for p in got.leaves if got.grads[p] is None and want.grads[p] is not None]
    if found:
        return found
    for path, leaf in got.leaves.items():
        one = len(got.outs) == 1 and got.outs[0].shape == leaf.shape  # elementwise: d out / d x
        scale = incoming(got.outs[0], 0).double().reshape(-1) if one else None
        if (theirs := want.grads[path]) is not None:
            found += _gradient(ref, parts, path, leaf, got.grads[path], theirs, tol, scale)
    return found


def _sample(case: Case, n: int, sample: Sample) -> list[Finding]:
    """The findings on one sample; CannotRun where the op cannot run as the models call it."""
    label, parts = sample[0], parts_of(sample, case.names)
    must = sample[3] and all(t.isfinite().all() for _, t in tensors(sample[1:3], "")
                             if t.is_floating_point())
    want, got = run_op(case.ref, parts, first=n == 0), run_op(case.fn, parts, first=n == 0)
    if got.error and (must or isinstance(got.error[1], CannotRun)):
        raise CannotRun(f"{got.error[0]} on {label}: {line(got.error[1])}")
    if want.error:
        if n == 0:
            raise CannotRun(f"calling the reference on {label}: {line(want.error[1])}")
        same = got.error and got.error[0] == want.error[0]
        return [("same as the reference" if same else "note",
                 f"{label}: {want.error[0]} the reference raised {line(want.error[1])}")]
    if got.error:
        return [("note", f"{label}: {got.error[0]} raised {line(got.error[1])}")]
    like, tol = want.raw if case.like is case.ref else run_op(case.like, parts).raw, case.tol
    if case.contract == "the reference" and form(got.raw) != form(like) == form(got.raw).replace(
            "float32", "float64"):  # no model calls it (any): judged at its own precision
        want, got = (run_op(f, parts, torch.float32) for f in (case.ref, case.fn))
        like, tol = want.raw, TOL[torch.float32]  # (the training row notes it)
    if form(got.raw) != form(like):
        text = f"it returns {form(got.raw)} on {label}; {case.contract} returns {form(like)}"
        if must:
            raise CannotRun(text)
        return [("note", text)]
    return [(s if must else "note", f"{label}: {text}")
            for s, text in compare_runs(case.ref, parts, got, want, tol)]


def judge_training(case: Case) -> list[Finding]:
    """Forward and gradients against the reference's autograd, per sample; a difference on
    non-finite or never-used inputs is a note. CannotRun: the op cannot run."""
    found = [f for n, sample in enumerate(case.samples) for f in _sample(case, n, sample)]
    if "wrong" not in (s for s, _ in found):
        n, how_ = len(case.samples), "run" if case.ref is case.fn else "as the reference's"
        found.insert(0, ("pass", f"forward and gradients {how_} on {n} sample{'s' * (n > 1)}"))
    return found


def call_on(fn: Callable, parts, params: dict, dtype=None) -> list[torch.Tensor]:
    """fn's floating outputs on the sample's arguments (floating ones in `dtype`), what trains
    taken from `params` (as non-leaf copies, the way a model calls an op on activations)."""

    def arg(p, t):
        t = params[p] if p in params else t.detach()
        return t.to(dtype if dtype and t.is_floating_point() else t.dtype, copy=True)

    return floats(call(fn, parts, arg))


def leaves_of(parts) -> dict[str, torch.Tensor]:
    """Copies of the tensors of a sample's arguments that train (requires_grad), by path."""
    return {p: t.detach().clone() for n, v, _ in parts for p, t in tensors(v, n) if t.requires_grad}
