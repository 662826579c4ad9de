"""The card's correctness checks: parity with the twin, gradients, forward AD, vmap, compile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.autograd.gradcheck import GradcheckError

from models.ops.choice import OpEntry

# rtol, atol per dtype: room for the roundings of a different but right formula.
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-7, 1e-7)}
# What the app needs of an op beyond first-order eager training (sgd, adam, lbfgs): a missing
# feature listed here fails the card; any other is a skip with its reason.
NEEDS = {
    "legendre_p3": {
        "forward AD": "optimizer=lm needs it (Jacobian by torch.func.jacfwd)",
        "double backward": "optimizer=newton needs it (Hessian by double backward)",
        "vmap": "optimizer=lm and newton need it (torch.func batches their derivatives)",
    },
}
# Where the app could use a feature without needing it by default.
ALSO = {op: "optimizer=lm|newton on task=mlp would need it" for op in ("activation", "linear")}


@dataclass
class Check:
    """One row of the card: a check's name, pass | fail | skip | info, and what it found."""

    name: str
    status: str
    detail: str


@dataclass
class Subject:
    """The op under test: its name, spec, callable, OPS entry, and how to run the checks."""

    op: str
    spec: str
    fn: Callable[..., torch.Tensor]
    entry: OpEntry
    quick: bool = False
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = "aot_eager"

    @property
    def twin(self) -> Callable[..., torch.Tensor]:
        """The built-in twin the op is checked against."""
        return self.entry.builtin

    def inputs(self, size: int, dtype: torch.dtype, requires_grad: bool = False, seed: int = 0):
        """The op's reference arguments (fresh tensors each call)."""
        return self.entry.inputs(size, dtype, self.device, requires_grad, seed)

    def diff(self, args: tuple) -> list[torch.Tensor]:
        """The differentiable arguments of `args`."""
        return [args[i] for i in self.entry.differentiable]

    def with_diff(self, args: tuple, values) -> tuple:
        """`args` with its differentiable arguments replaced by `values`."""
        out = list(args)
        for i, v in zip(self.entry.differentiable, values, strict=True):
            out[i] = v
        return tuple(out)


def line(err: BaseException, limit: int = 240) -> str:
    """`Type: first line of the message`, clipped."""
    lines = [s.strip() for s in str(err).splitlines() if s.strip()]
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def unsupported(s: Subject, name: str, feature: str, reason: str) -> Check:
    """A skip with its reason, or a fail when the app needs `feature` of this op."""
    need = NEEDS.get(s.op, {}).get(feature)
    if need:
        return Check(name, "fail", f"not supported, and {need}: {reason}")
    also = f" ({ALSO[s.op]})" if s.op in ALSO else ""
    return Check(name, "skip", f"not supported{also}: {reason}")


def compare(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> tuple[bool, str]:
    """(within tolerance?, 'max abs err …, max rel err …') of got against want."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        kind = f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got)
        return False, f"got {kind}, want {tuple(want.shape)} {want.dtype}"
    rtol, atol = TOL[dtype]
    ok = torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    diff = (got.detach().double() - want.detach().double()).abs().nan_to_num(nan=float("inf"))
    nonzero = want != 0
    scale = want.detach().double()[nonzero].abs()
    rel = (diff[nonzero] / scale).max().item() if nonzero.any() else 0.0
    abs_err = diff.max().item() if diff.numel() else 0.0
    return ok, f"max abs err {abs_err:.3g}, max rel err {rel:.3g} (rtol {rtol:g}, atol {atol:g})"


def parity(s: Subject, dtype: torch.dtype) -> list[Check]:
    """Forward (and in-place updates of non-differentiable arguments) and backward vs the twin."""
    name = str(dtype).removeprefix("torch.")
    size = 16 if s.quick else 64
    got_args, want_args = (s.inputs(size, dtype, requires_grad=True) for _ in range(2))
    want = s.twin(*want_args)
    try:
        got = s.fn(*got_args)
    except Exception as err:
        failed = f"the op raised {line(err)}"
        return [Check(f"{d} parity {name}", "fail", failed) for d in ("forward", "backward")]
    ok, detail = compare(got, want, dtype)
    for i, (a, b) in enumerate(zip(got_args, want_args, strict=True)):
        if isinstance(a, torch.Tensor) and i not in s.entry.differentiable and not a.equal(b):
            ok, detail = False, f"argument {i} differs after the call (in-place update): {detail}"
    checks = [Check(f"forward parity {name}", "pass" if ok else "fail", detail)]
    grad_out = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    grad_out = grad_out.to(s.device)
    try:
        got_g = torch.autograd.grad(got, s.diff(got_args), grad_out, allow_unused=True)
    except Exception as err:
        return [*checks, Check(f"backward parity {name}", "fail", f"backward raised {line(err)}")]
    want_g = torch.autograd.grad(want, s.diff(want_args), grad_out)
    results = [
        compare(torch.zeros_like(w) if g is None else g, w, dtype)
        for g, w in zip(got_g, want_g, strict=True)
    ]
    worst = next((r for r in results if not r[0]), results[0])
    checks.append(Check(f"backward parity {name}", "pass" if worst[0] else "fail", worst[1]))
    return checks


def gradcheck(s: Subject) -> Check:
    """torch.autograd.gradcheck in float64: the backward against finite differences."""
    args = s.inputs(3, torch.float64, requires_grad=True)
    try:
        torch.autograd.gradcheck(
            lambda *d: s.fn(*s.with_diff(args, d)), s.diff(args), fast_mode=s.quick
        )
    except GradcheckError as err:
        return Check("gradcheck", "fail", line(err))
    except Exception as err:
        return Check("gradcheck", "fail", f"raised {line(err)}")
    return Check("gradcheck", "pass", "float64, analytical = numerical gradient")


def gradgradcheck(s: Subject) -> Check:
    """Double backward: gradgradcheck if it runs; if it raises, a skip (or fail) saying so."""
    name = "gradgradcheck"
    args = s.inputs(3, torch.float64, requires_grad=True)
    diff = s.diff(args)
    try:
        out = s.fn(*args)
        v = torch.randn_like(out).requires_grad_()
        grads = torch.autograd.grad(out, diff, v, create_graph=True)
        total = sum((g * torch.randn_like(g)).sum() for g in grads)
        torch.autograd.grad(total, [*diff, v], allow_unused=True)
    except Exception as err:
        return unsupported(s, name, "double backward", f"double backward raises {line(err)}")
    try:
        torch.autograd.gradgradcheck(
            lambda *d: s.fn(*s.with_diff(args, d)), diff, fast_mode=s.quick
        )
    except Exception as err:
        # e.g. torch's once_differentiable, whose double backward gives None instead of raising
        return Check(name, "fail", f"double backward runs but is wrong: {line(err)}")
    return Check(name, "pass", "float64, second derivatives = finite differences of the first")


def forward_ad(s: Subject) -> Check:
    """torch.func.jvp of the op against the twin's (float64)."""
    name = "forward AD (jvp)"
    args = s.inputs(3, torch.float64)
    diff = tuple(s.diff(args))
    g = torch.Generator().manual_seed(2)
    tangents = tuple(torch.randn(d.shape, generator=g, dtype=d.dtype).to(s.device) for d in diff)

    def jvp(fn):
        fresh = s.inputs(3, torch.float64)
        return torch.func.jvp(lambda *d: fn(*s.with_diff(fresh, d)), diff, tangents)[1]

    try:
        want = jvp(s.twin)
    except Exception as err:
        return Check(name, "skip", f"the builtin twin does not support it either: {line(err)}")
    try:
        got = jvp(s.fn)
    except Exception as err:
        return unsupported(s, name, "forward AD", line(err))
    ok, detail = compare(got, want, torch.float64)
    if not ok and isinstance(got, torch.Tensor) and not got.any() and want.any():
        # torch.library custom ops have no forward-AD formula: their tangents come out zero.
        detail = f"zero tangent where the twin's is not (no forward-AD formula?): {detail}"
    return Check(name, "pass" if ok else "fail", f"tangent vs the twin's: {detail}")


def vmap(s: Subject) -> Check:
    """torch.func.vmap over a batch of first arguments, against the twin under vmap."""
    xs = torch.stack([s.inputs(3, torch.float64, seed=k)[0] for k in range(3)])

    def batched(fn):
        rest = s.inputs(3, torch.float64)[1:]
        return torch.func.vmap(lambda x: fn(x, *rest))(xs)

    try:
        want = batched(s.twin)
    except Exception as err:
        return Check("vmap", "skip", f"the builtin twin does not support it either: {line(err)}")
    try:
        got = batched(s.fn)
    except Exception as err:
        return unsupported(s, "vmap", "vmap", line(err))
    ok, detail = compare(got, want, torch.float64)
    return Check("vmap", "pass" if ok else "fail", f"vmap over x vs the twin's: {detail}")
