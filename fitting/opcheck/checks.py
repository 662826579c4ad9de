"""The card's first-order checks: parity with the reference (at the reference inputs and in
every case the slot is called in), and gradcheck."""

from __future__ import annotations

import re

import torch
from torch.autograd.gradcheck import GradcheckError

from fitting.opcheck.subject import Check, Subject, compare, line
from models.ops.capability import first_grads

Result = tuple[bool, str]


def _fresh(args: tuple) -> tuple:
    """Copies of `args`' tensors as new leaves (same strides, same requires_grad)."""
    return tuple(a.detach().clone().requires_grad_(a.requires_grad)
                 if isinstance(a, torch.Tensor) else a for a in args)  # fmt: skip


def _mutated(s: Subject, args: tuple, before: list[torch.Tensor]) -> str | None:
    for i, old in zip(s.entry.differentiable, before, strict=True):
        if not torch.equal(args[i].detach().nan_to_num(), old.nan_to_num()):
            name = s.names[i]
            return (f"modifies its input {name} in place; call ctx.mark_dirty({name}) or work on "
                    "a copy")  # fmt: skip
    return None


def _forward(s: Subject, got, want, got_args, want_args, tol) -> Result:
    """The output, then every non-differentiable tensor argument after the call (running
    statistics updated in place), against the reference's."""
    x = got_args[0] if isinstance(got_args[0], torch.Tensor) else None
    mask = None
    if x is not None and x.shape == want.shape:
        # Where the reference gives NaN for a number (P3 at inf: inf - inf) it is not defined;
        # a NaN input must still map as the reference maps it.
        mask = want.detach().isnan().logical_not() | x.detach().isnan()
    ok, detail = compare(got, want, tol, mask, at=x)
    for i, (a, b) in enumerate(zip(got_args, want_args, strict=True)):
        if isinstance(a, torch.Tensor) and i not in s.entry.differentiable:
            same, d = compare(a, b, tol)
            if not same and ok:
                ok, detail = False, f"{s.names[i]} after the call differs from the reference's: {d}"
    return ok, detail


def _backward(s: Subject, got, want, got_args, want_args, tol) -> Result:
    """The gradients of every differentiable argument for a fixed incoming gradient."""
    g = torch.Generator().manual_seed(1)
    grad_out = torch.randn(want.shape, generator=g, dtype=torch.float64).to(want.device, want.dtype)
    try:
        got_g = first_grads(got, s.diff(got_args), grad_out)
    except Exception as err:
        return False, f"backward raised {line(err)}"
    want_g = first_grads(want, s.diff(want_args), grad_out)
    flat_got, flat_want = [], []
    for i, a, gg, wg in zip(s.entry.differentiable, s.diff(got_args), got_g, want_g, strict=True):
        name = s.names[i]
        if wg is None:
            continue
        if gg is None:
            return False, (f"its backward returns no gradient for {name}, so {name} would never "
                           "train (a None gradient freezes a parameter)")  # fmt: skip
        mask = torch.isfinite(a.detach()) if a.shape == wg.shape else None
        ok, detail = compare(gg, wg, tol, mask, at=a)
        if not ok:
            return False, f"gradient of {name}: {detail}"
        keep = slice(None) if mask is None else mask
        flat_got.append(gg.detach()[keep].flatten())
        flat_want.append(wg.detach()[keep].flatten())
    if not flat_want:
        return True, "no gradient to compare"
    return compare(torch.cat(flat_got), torch.cat(flat_want), tol)


def run_pair(s: Subject, fn, ref, args: tuple, dtype: torch.dtype) -> tuple[Result, Result]:
    """(forward, backward) of fn against ref, each on its own copy of `args`."""
    tol = s.tolerance(dtype)
    got_args, want_args = _fresh(args), _fresh(args)
    want = ref(*want_args)
    before = [t.detach().clone() for t in s.diff(got_args)]
    try:
        got = fn(*got_args)
    except Exception as err:
        failed = (False, f"the op raised {line(err)}")
        return failed, failed
    mutated = _mutated(s, got_args, before)
    if mutated:
        return (False, mutated), (False, mutated)
    forward = _forward(s, got, want, got_args, want_args, tol)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return forward, (False, "not compared: the output does not match")
    if not got.requires_grad:
        return forward, (False, "its output does not require grad, so nothing trains")
    return forward, _backward(s, got, want, got_args, want_args, tol)


def parity(s: Subject, dtype: torch.dtype) -> list[Check]:
    """Forward (and in-place updates of non-differentiable arguments) and backward vs the
    reference, on the slot's reference inputs."""
    name = str(dtype).removeprefix("torch.")
    args = s.inputs(16 if s.quick else 64, dtype, requires_grad=True)
    forward, backward = run_pair(s, s.fn, s.twin, args, dtype)
    return [
        Check(f"forward parity {name}", "pass" if forward[0] else "wrong", forward[1], "training"),
        Check(f"backward parity {name}", "pass" if backward[0] else "wrong", backward[1],
              "training"),
    ]  # fmt: skip


def cases(s: Subject, dtype: torch.dtype) -> list[Check]:
    """One row per other way the op is called (edge values, eval mode, N-D input, ...):
    forward and gradients (where the input is finite) against the reference."""
    name = str(dtype).removeprefix("torch.")
    rows = []
    for label, args, fn, ref in s.cases(dtype):
        forward, backward = run_pair(s, fn, ref, args, dtype)
        if not forward[0]:
            status, detail = "wrong", f"forward: {forward[1]}"
        elif not backward[0]:
            status, detail = "wrong", f"backward: {backward[1]}"
        else:
            status, detail = "pass", f"forward and gradients: {forward[1]}"
        rows.append(Check(f"{label} ({name})", status, detail, "training"))
    return rows


def gradcheck(s: Subject) -> Check:
    """torch.autograd.gradcheck in float64: the backward against finite differences."""
    args = s.inputs(3, torch.float64, requires_grad=True)
    try:
        torch.autograd.gradcheck(
            lambda *d: s.fn(*s.with_diff(args, d)), s.diff(args), fast_mode=s.quick
        )
    except GradcheckError as err:
        return Check("gradcheck", "wrong", name_inputs(s, line(err)), "training")
    except Exception as err:
        return Check("gradcheck", "wrong", f"raised {line(err)}", "training")
    return Check("gradcheck", "pass", "float64, analytical = numerical gradient", "training")


def name_inputs(s: Subject, text: str) -> str:
    """`… with respect to input 1,` → `… with respect to input 1 (weight),`."""
    diff = s.entry.differentiable

    def named(m: re.Match) -> str:
        k = int(m.group(1))
        return f"input {k} ({s.names[diff[k]]})" if k < len(diff) else m.group(0)

    return re.sub(r"input (\d+)", named, text).rstrip(",")
