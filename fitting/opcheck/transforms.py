"""The card's rows beyond first order: double backward (optimizer=newton), forward AD and vmap
(optimizer=lm). A transform the op does not implement is unsupported, with the reason; one
that runs and gives other numbers than the reference's is wrong."""

from __future__ import annotations

import torch

from fitting.opcheck.checks import name_inputs
from fitting.opcheck.subject import Check, Subject, compare, line
from models.ops.capability import first_grads, jvp_tangent, known_reason, second_grads

SAVED_INTERMEDIATE = (
    "likely cause: a tensor computed in forward and saved for backward is a constant to double "
    "backward; save the inputs (or the output) and recompute it in backward with torch ops"
)


def _missing_first_order(s: Subject, args: tuple) -> str | None:
    out = s.fn(*args)
    grads = first_grads(out, s.diff(args), torch.ones_like(out))
    missing = [s.names[i] for i, g in zip(s.entry.differentiable, grads, strict=True) if g is None]
    return missing[0] if missing else None


def gradgradcheck(s: Subject) -> Check:
    """Double backward: unsupported when it raises or gives no second derivative at all;
    gradgradcheck (against finite differences) when it runs."""
    name, use = "gradgradcheck", "second order"
    reason = known_reason(s.fn, "double_backward")
    if reason:
        return Check(name, "unsupported", reason, use)
    args = s.inputs(3, torch.float64, requires_grad=True)
    try:
        missing = _missing_first_order(s, args)
        if missing:
            return Check(name, "skip", f"the backward gives no gradient for {missing} "
                         "(see backward parity)", use)  # fmt: skip
        got = second_grads(s.fn, args, s.entry.differentiable)
    except Exception as err:
        return Check(name, "unsupported", f"double backward raises {line(err)}", use)
    if all(g is None for g in got):
        want = second_grads(s.twin, s.inputs(3, torch.float64, requires_grad=True),
                            s.entry.differentiable)  # fmt: skip
        if any(g is not None for g in want):
            return Check(name, "unsupported", "its backward is not differentiable: every second "
                         "derivative is None (as under once_differentiable)", use)  # fmt: skip
    try:
        torch.autograd.gradgradcheck(
            lambda *d: s.fn(*s.with_diff(args, d)), s.diff(args), fast_mode=s.quick
        )
    except Exception as err:
        why = name_inputs(s, line(err))
        return Check(name, "wrong", f"double backward runs but is wrong: {why}; "
                     f"{SAVED_INTERMEDIATE}", use)  # fmt: skip
    return Check(name, "pass", "float64, second derivatives = finite differences of the first", use)


def forward_ad(s: Subject) -> Check:
    """torch.func.jvp of the op against the reference's (float64)."""
    name, use = "forward AD (jvp)", "forward AD"
    diff = s.entry.differentiable
    try:
        want = jvp_tangent(s.twin, s.inputs(3, torch.float64), diff)
    except Exception as err:
        return Check(name, "skip", f"the reference does not support it either: {line(err)}", use)
    reason = known_reason(s.fn, "forward_ad")
    if reason:
        return Check(name, "unsupported", reason, use)
    try:
        got = jvp_tangent(s.fn, s.inputs(3, torch.float64), diff)
    except Exception as err:
        return Check(name, "unsupported", line(err), use)
    ok, detail = compare(got, want, s.tolerance(torch.float64))
    if not ok and isinstance(got, torch.Tensor) and not got.any() and want.any():
        detail = f"the tangent is silently zero where the reference's is not: {detail}"
    return Check(name, "pass" if ok else "wrong", f"tangent vs the reference's: {detail}", use)


def vmap(s: Subject) -> Check:
    """torch.func.vmap over a batch of first arguments, against the reference under vmap."""
    name, use = "vmap", "forward AD"
    x = s.inputs(3, torch.float64)[0]
    xs = torch.stack([x * (1 + 0.25 * k) for k in range(3)])

    def batched(fn):
        rest = s.inputs(3, torch.float64)[1:]
        return torch.func.vmap(lambda b: fn(b, *rest))(xs)

    try:
        want = batched(s.twin)
    except Exception as err:
        return Check(name, "skip", f"the reference does not support it either: {line(err)}", use)
    try:
        got = batched(s.fn)
    except Exception as err:
        return Check(name, "unsupported", known_reason(s.fn, "vmap") or line(err), use)
    ok, detail = compare(got, want, s.tolerance(torch.float64))
    return Check(name, "pass" if ok else "wrong", f"vmap over x vs the reference's: {detail}", use)
