"""`check_op`: the app's pre-check of a user op, before a run writes anything.

It calls the op the way the models do (every case of its slot, forward and backward) in the
run's dtype and on its device, and refuses in one line an op that fails there, gives a
parameter no gradient, modifies an input in place unmarked, or lacks what the optimizer needs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .capability import first_grads, jvp_tangent, known_reason, second_grads
from .guard import OpAborted, call_guarded
from .slots import OPS, OpEntry
from .spec import OpSpecError, one_line

CHECK_TIMEOUT = 30.0  # seconds the whole pre-check of one op may take
# need -> (the optimizer, what it needs, the fix besides another optimizer)
NEEDS = {
    "double_backward": ("optimizer=newton", "double backward (the Hessian)",
                        "write its backward with differentiable torch ops"),
    "forward_ad": ("optimizer=lm", "forward-mode AD (jvp)", "add a jvp staticmethod"),
}  # fmt: skip


def op_entry(op: str) -> OpEntry:
    """The OPS entry of `op`, or an OpSpecError listing the ops."""
    try:
        return OPS[op]
    except KeyError:
        raise OpSpecError(f"unknown op {op!r}; choose one of {sorted(OPS)}") from None


def check_op(
    op: str,
    fn: Callable[..., torch.Tensor],
    spec: str = "custom",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    needs: tuple[str, ...] = (),
) -> None:
    """Call `fn` as `op` on each of the slot's reference inputs (forward and backward) and try
    what `needs` asks ("double_backward", "forward_ad"); raise an OpSpecError naming the key
    if anything fails."""
    entry, key = op_entry(op), f"ops.{op}={spec}"
    unknown = [n for n in needs if n not in NEEDS]
    if unknown:
        raise ValueError(f"check_op: unknown needs {unknown}; choose from {sorted(NEEDS)}")
    try:
        call_guarded(_check, key, op, entry, fn, dtype, device, tuple(needs),
                     timeout=CHECK_TIMEOUT)  # fmt: skip
    except OpAborted as err:
        raise OpSpecError(f"{key}: {err}") from None


def _check(key, op, entry, fn, dtype, device, needs) -> None:
    base = entry.inputs(4, dtype, device, requires_grad=True)
    cases = [("a reference input", base), *entry.cases(dtype, device, requires_grad=True)]
    for label, args in cases:
        _check_case(key, op, entry, fn, label, args)
    for need in needs:
        reason = _missing(fn, need, entry.inputs(3, dtype, device, requires_grad=True), entry)
        if reason:
            optimizer, what, fix = NEEDS[need]
            raise OpSpecError(
                f"{key}: {optimizer} needs {what}, which this op does not support ({reason}); "
                f"use optimizer=lbfgs or gd, or {fix}"
            )


def _call(key, op, entry, fn, label, args) -> torch.Tensor:
    try:
        return fn(*args)
    except TypeError as err:
        if "argument" in str(err):
            raise OpSpecError(
                f"{key}: wrong signature: calling it as {entry.signature} raised {one_line(err)}"
            ) from None
        hint = ""
        if op == "conv_bn":
            hint = " (stride, padding and dilation come as tuples, e.g. (1, 1), as nn.Conv2d " \
                   "stores them)"
        raise OpSpecError(
            f"{key}: {entry.signature} on {label} raised {one_line(err)}{hint}"
        ) from None
    except Exception as err:
        raise OpSpecError(f"{key}: {entry.signature} on {label} raised {one_line(err)}") from None


def _check_case(key, op, entry, fn, label, args) -> None:
    plain = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
    want = entry.builtin(*plain)
    names = entry.arg_names
    diff = [args[i] for i in entry.differentiable]
    before = [t.detach().clone() for t in diff]
    out = _call(key, op, entry, fn, label, args)
    if not isinstance(out, torch.Tensor):
        raise OpSpecError(
            f"{key}: returned {type(out).__name__}, expected one tensor of shape "
            f"{tuple(want.shape)}"
        )
    if out.shape != want.shape or out.dtype != want.dtype:
        raise OpSpecError(
            f"{key}: wrong output on {label}: shape {tuple(out.shape)} {out.dtype}, expected "
            f"{tuple(want.shape)} {want.dtype} (the builtin's on the same input)"
        )
    for i, t, old in zip(entry.differentiable, diff, before, strict=True):
        if not torch.equal(t.detach().nan_to_num(), old.nan_to_num()):
            raise OpSpecError(
                f"{key}: modifies its input {names[i]} in place; call ctx.mark_dirty({names[i]}) "
                "or work on a copy"
            )
    if not out.requires_grad:
        raise OpSpecError(
            f"{key}: its output does not require grad for inputs that do, so nothing trains; "
            "compute it with torch ops or wrap it in a torch.autograd.Function"
        )
    try:
        grads = first_grads(out, diff, torch.ones_like(out))
    except Exception as err:
        raise OpSpecError(f"{key}: backward on {label} raised {one_line(err)}") from None
    for i, grad in zip(entry.differentiable, grads, strict=True):
        if grad is None:
            name = names[i]
            frozen = "the layers before it" if i == 0 else name
            raise OpSpecError(
                f"{key}: its backward returns no gradient for {name}, so {frozen} would never "
                "train"
            )


def _missing(fn, need: str, args: tuple, entry: OpEntry) -> str | None:
    """Why `fn` does not support `need` on `args`, or None when it does."""
    reason = known_reason(fn, need) or (need == "forward_ad" and known_reason(fn, "vmap"))
    if reason:
        return reason
    diff = entry.differentiable
    try:
        if need == "forward_ad":
            jvp_tangent(fn, tuple(a.detach() if isinstance(a, torch.Tensor) else a
                                  for a in args), diff)  # fmt: skip
            x = args[0].detach()
            torch.func.vmap(lambda b: fn(b, *args[1:]))(torch.stack([x, x]))
        elif all(g is None for g in second_grads(fn, args, diff)):
            return "its backward is not differentiable: every second derivative is None"
    except Exception as err:
        return one_line(err)
    return None
