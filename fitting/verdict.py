"""The verdicts of an op against its reference, shared by the pre-check (fitting.precheck) and the
card (fitting.opcheck): the training row (forward and gradients against the reference's
autograd, as models call the op; kinks and non-finite values as notes), and the rows of what
newton and lm compute (fitting.optim.derivatives)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch

from fitting.optim.derivatives import hessian, jacobian
from fitting.slots import Sample, line

RANK = ("n/a", "pass", "same as the reference", "note", "not judged", "unsupported", "wrong")
NEEDS = {"second_order": "optimizer=newton", "forward_ad": "optimizer=lm"}
Finding = tuple[str, str]  # (a RANK status, what was found)


class CannotRun(Exception):
    """The op (or its reference) cannot be called on the inputs at all."""


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


def tensors(obj, path: str) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) of every tensor in obj (a tensor, or lists and tuples of them)."""
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if isinstance(obj, list | tuple):
        return [pair for i, o in enumerate(obj) for pair in tensors(o, f"{path}[{i}]")]
    return []


def _map(obj, f: Callable, path: str):
    if isinstance(obj, torch.Tensor):
        return f(path, obj)
    if isinstance(obj, list | tuple):
        return type(obj)(_map(o, f, f"{path}[{i}]") for i, o in enumerate(obj))
    return obj


def parts_of(sample: Sample, names: list[str]) -> list[tuple[str, object, bool]]:
    """(name, value, keyword?) of each argument of the sample."""
    _, args, kwargs, _ = sample
    names = [*names[: len(args)], *(f"args[{i}]" for i in range(len(names), len(args)))]
    return [*((n, a, False) for n, a in zip(names, args, strict=True)),
            *((k, v, True) for k, v in kwargs.items())]


def _apply(fn: Callable, parts, f: Callable) -> list[torch.Tensor]:
    """fn's floating outputs, each tensor argument replaced by f(path, tensor)."""
    try:
        out = fn(*(_map(v, f, n) for n, v, kw in parts if not kw),
                 **{n: _map(v, f, n) for n, v, kw in parts if kw})
    except SystemExit as err:
        raise CannotRun(f"it called sys.exit({err.code!r}); an op returns or raises") from None
    return [t for _, t in tensors(out, "out") if t.is_floating_point()]


def _v(t: torch.Tensor, k: int) -> torch.Tensor:  # the fixed incoming gradient of output k
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(k),
                       dtype=torch.float64).to(t.device, t.dtype)


def run_op(fn: Callable, parts, dtype=None, shift: dict | None = None):
    """(leaves, other tensors, outputs, {leaf: gradient}) of one call on fresh copies, what
    trains called as a non-leaf (as a model calls an op on activations); or (where, error)."""
    leaves, rest = {}, {}

    def fresh(path, t):
        c = t.detach().to(dtype if dtype and t.is_floating_point() else t.dtype, copy=True)
        if not t.requires_grad:
            rest[path] = c
            return c
        leaves[path] = (c + (shift or {}).get(path, 0)).requires_grad_()
        return leaves[path].clone()

    try:
        outs = _apply(fn, parts, fresh)
    except CannotRun:
        raise
    except Exception as err:
        return "calling it", err
    pairs = [(o, _v(o, k)) for k, o in enumerate(outs) if o.requires_grad]
    try:
        grads = torch.autograd.grad([o for o, _ in pairs], list(leaves.values()),
                                    [v for _, v in pairs], allow_unused=True) if pairs else ()
    except Exception as err:
        return "its backward", err
    return leaves, rest, outs, dict(zip(leaves, [*grads, *[None] * len(leaves)], strict=False))


def _differ(got: torch.Tensor, want: torch.Tensor, tol) -> list[int]:
    """The flat indices where got and want differ beyond tol, worst first."""
    g, w = got.detach().double().reshape(-1), want.detach().double().reshape(-1)
    close = torch.isclose(g, w, *tol, equal_nan=True)
    err = torch.where(close, 0.0, (g - w).abs().nan_to_num(torch.inf))
    return err.argsort(descending=True)[: int((~close).sum())].tolist()


def _how(got, want, bad: list[int], tol, i: int | None = None, scale=None) -> str:
    i = bad[0] if i is None else i
    g, w = (_item(t, i, scale) for t in (got, want))
    return f"{g:.6g} vs {w:.6g}; {len(bad)} of {got.numel()} differ beyond rtol {tol[0]:g}, " \
        f"atol {tol[1]:g}"


def _item(t: torch.Tensor, i: int, scale=None) -> float:  # per unit incoming gradient (scale)
    return t.reshape(-1)[i].item() / (1.0 if scale is None else scale[i].item()) + 0.0


def _at(path: str, t: torch.Tensor, i: int, value: bool = True) -> str:
    idx = ", ".join(str(int(k)) for k in torch.unravel_index(torch.tensor(i), t.shape))
    return f"{path}[{idx}]" + (f" = {t.reshape(-1)[i].item():g}" if value else "")


def _gradient(ref, parts, path: str, leaf, got, want, tol, scale) -> list[Finding]:
    """A gradient that differs is wrong, unless only where the reference has a kink and there
    between its one-sided derivatives (its gradients a small step either side)."""
    bad = _differ(got, want, tol)
    if not bad:
        return []
    x = leaf.detach().double()
    sides = [run_op(ref, parts, torch.float64, {path: s * 1e-6 * x.abs().clamp_min(1)})
             for s in (-1, 1)] if x.isfinite().all() else []
    ok = torch.zeros(len(bad), dtype=torch.bool)
    if sides and all(len(s) == 4 for s in sides):
        a, b = (s[3][path].reshape(-1).double() for s in sides)
        lo, hi, g = a.minimum(b), a.maximum(b), got.detach().double().reshape(-1)
        slack = 1e-3 * (1 + lo.abs() + hi.abs())
        ok = ((hi - lo > slack) & (g >= lo - slack) & (g <= hi + slack))[bad]
    if not ok.all():
        i = bad[int((~ok).nonzero()[0])]
        return [("wrong", f"gradient of {path} at {_at(path, leaf, i)}: "
                          f"{_how(got, want, bad, tol, i, scale)}")]
    i = bad[0]
    sided = sorted((_item(lo, i, scale), _item(hi, i, scale)))
    return [("note", f"at {_at(path, leaf, i)} the reference has a kink (one-sided derivatives "
                     f"{sided[0]:.3g} and {sided[1]:.3g}): the gradient {_item(got, i, scale):.6g},"
                     f" the reference's {_item(want, i, scale):.6g}, both right ({len(bad)} such "
                     f"point{'s' * (len(bad) > 1)})")]


def compare_runs(ref, parts, got, want, tol) -> list[Finding]:
    """What differs between two run_op results (got: the op's, want: the reference's)."""
    (leaves, rest, outs, grads), (_, w_rest, w_outs, w_grads) = got, want
    if [(o.shape, o.dtype) for o in outs] != [(o.shape, o.dtype) for o in w_outs]:
        shapes = [[f"{tuple(o.shape)} {o.dtype}" for o in os] for os in (outs, w_outs)]
        return [("wrong", f"returns {shapes[0]}, the reference {shapes[1]}")]
    found, x = [], next(iter(leaves.items()), None)
    for k, (o, w) in enumerate(zip(outs, w_outs, strict=True)):
        if bad := _differ(o, w, tol):
            name = "out" if len(outs) == 1 else f"out[{k}]"
            where = _at(*x, bad[0]) if x and x[1].shape == o.shape else _at(name, o, bad[0], False)
            found.append(("wrong", f"forward at {where}: {_how(o, w, bad, tol)}"))
    for path, t in rest.items():
        if bad := _differ(t, w_rest[path], tol):
            found.append(("wrong", f"{path} after the call: {_how(t, w_rest[path], bad, tol)}"))
    if found:
        return found
    if any(o.requires_grad for o in w_outs) and not any(o.requires_grad for o in outs):
        return [("wrong", "its output does not require grad, so nothing before it trains")]
    for path, leaf in leaves.items():
        one = len(outs) == 1 and outs[0].shape == leaf.shape  # elementwise: say d out / d x
        scale = _v(outs[0], 0).double().reshape(-1) if one else None
        if grads[path] is None and w_grads[path] is not None:
            found.append(("wrong", f"no gradient for {path}, so {path} would never train"))
        elif w_grads[path] is not None:
            found += _gradient(ref, parts, path, leaf, grads[path], w_grads[path], tol, scale)
    return found


def judge_training(fn: Callable, ref: Callable, samples: list[Sample], names: list[str],
                   tol: tuple[float, float]) -> list[Finding]:
    """The training row: forward and gradients against the reference's autograd, per sample;
    a difference on non-finite or never-used inputs is a note. CannotRun: fn cannot run."""
    found = []
    for n, sample in enumerate(samples):
        label, parts = sample[0], parts_of(sample, names)
        must = sample[3] and all(t.isfinite().all() for _, t in tensors(sample[1:3], "")
                                 if t.is_floating_point())
        want, got = run_op(ref, parts), run_op(fn, parts)
        if n == 0 and (len(want) == 2 or got[0] == "calling it"):
            who, err = ("the reference", want) if len(want) == 2 else ("it", got)
            raise CannotRun(f"calling {who} on {label}: {line(err[1])}")
        if len(want) == 2:
            same = len(got) == 2 and got[0] == want[0]
            found.append(("same as the reference" if same else "note",
                          f"{label}: {want[0]} the reference raised {line(want[1])}"))
        elif len(got) == 2:
            found.append(("wrong" if must else "note", f"{label}: {got[0]} raised {line(got[1])}"))
        else:
            found += [(s if must else "note", f"{label}: {text}")
                      for s, text in compare_runs(ref, parts, got, want, tol)]
    if "wrong" not in (s for s, _ in found):
        found.insert(0, ("pass", "forward and gradients as the reference's on "
                                 f"{len(samples)} sample{'s' * (len(samples) > 1)}"))
    return found


def call_on(fn: Callable, parts, params: dict, dtype=None) -> list[torch.Tensor]:
    """fn's floating outputs on the sample's arguments (floating ones in `dtype`), what trains
    taken from `params` (as non-leaf copies, the way a model calls an op on activations)."""

    def arg(p, t):
        t = params[p] if p in params else t.detach()
        return t.to(dtype if dtype and t.is_floating_point() else t.dtype, copy=True)

    return _apply(fn, parts, arg)


def _derivative(use: str, fn: Callable, parts):
    """fitting.optim.derivatives' hessian of a squared output (as newton) or jacobian (as lm)."""
    leaves = leaves_of(parts)
    try:
        if use == "second_order":
            ps = {p: t.requires_grad_() for p, t in leaves.items()}
            return hessian(lambda: sum((o * _v(o, k)).square().sum() for k, o in
                                       enumerate(call_on(fn, parts, ps))), list(ps.values()))
        return jacobian(lambda p: torch.cat([o.reshape(-1) for o in
                                             call_on(fn, parts, p or leaves)]), leaves)
    except CannotRun:
        raise
    except Exception as err:
        return err


def judge_derivatives(use: str, fn: Callable, ref: Callable, sample: Sample, names: list[str],
                      tol: tuple[float, float]) -> list[Finding]:
    """The second_order (newton's hessian) or forward_ad (lm's jacobian) row, against the
    reference's on the same sample."""
    parts = parts_of(sample, names)
    what = f"{'hessian' if use == 'second_order' else 'jacobian'} (what {NEEDS[use]} runs)"
    got, want = _derivative(use, fn, parts), _derivative(use, ref, parts)
    if isinstance(want, Exception):
        same = isinstance(got, Exception)
        return [("same as the reference" if same else "not judged",
                 f"the reference's {what} fails{' too' if same else ''}: {line(want)}")]
    if isinstance(got, Exception):
        return [("unsupported", f"its {what} fails: {line(got)}")]
    if not (bad := _differ(got, want, tol)):
        return [("pass", f"{what} as the reference's")]
    if not got.any():  # what torch gives, silently, where it cannot differentiate
        why = "its backward is not differentiable (once_differentiable, or not torch ops)" \
            if use == "second_order" else "no jvp reaches it (a torch.library op drops tangents)"
        return [("unsupported", f"its {what} is all zeros, the reference's is not: {why}")]
    r, c = divmod(bad[0], got.shape[1])
    leaves = leaves_of(parts)
    where = f"d²/d{_entry(leaves, r)} d{_entry(leaves, c)}" if use == "second_order" \
        else f"d out[{r}]/d {_entry(leaves, c)}"
    return [("wrong", f"{what} at {where}: {_how(got, want, bad, tol)}")]


def leaves_of(parts) -> dict[str, torch.Tensor]:
    """Copies of the tensors of a sample's arguments that train (requires_grad), by path."""
    return {p: t.detach().clone() for n, v, _ in parts for p, t in tensors(v, n)
            if t.requires_grad}


def _entry(leaves: dict[str, torch.Tensor], j: int) -> str:
    for p, t in leaves.items():
        if j < t.numel():
            return _at(p, t, j, False)
        j -= t.numel()
    return "?"
