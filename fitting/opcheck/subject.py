"""What the card checks (the op, its reference, how to call them) and what a check finds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from models.ops.choice import OpEntry

# rtol, atol per dtype: room for the roundings of a different but right formula.
TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
}
STATUSES = ("pass", "wrong", "unsupported", "skip", "info")
# use -> how the verdict names it
USES = {
    "training": "right for training (forward, first-order gradients)",
    "second order": "right for second order (double backward: optimizer=newton)",
    "forward AD": "right for forward AD (jvp, vmap: optimizer=lm)",
    "compile": "compiles (torch.compile fullgraph)",
    "library": "passes torch.library.opcheck",
}
Case = tuple[str, tuple, Callable, Callable]  # label, positional args, op, reference


@dataclass
class Check:
    """One row of the card: a check's name, its status (STATUSES), what it found, and the use
    (USES) its verdict counts towards."""

    name: str
    status: str
    detail: str
    use: str = ""


@dataclass
class Subject:
    """The op under test and its reference: callables, the slot's entry (reference inputs,
    argument names, differentiable positions), and how to run the checks."""

    op: str
    spec: str
    fn: Callable[..., torch.Tensor]
    entry: OpEntry
    quick: bool = False
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = "aot_eager"
    ref: Callable[..., torch.Tensor] | None = None
    ref_spec: str = "builtin"
    dtype: torch.dtype = torch.float32  # the dtype of the first parity rows and the cases
    tol: tuple[float | None, float | None] = (None, None)  # --rtol, --atol
    extra_cases: list[Case] = field(default_factory=list)

    @property
    def twin(self) -> Callable[..., torch.Tensor]:
        """The reference the op is checked against (the built-in twin unless --ref)."""
        return self.entry.builtin if self.ref is None else self.ref

    @property
    def names(self) -> tuple[str, ...]:
        """The op's argument names."""
        return self.entry.arg_names

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for `dtype`, --rtol/--atol where given."""
        rtol, atol = TOL[dtype]
        return (self.tol[0] if self.tol[0] is not None else rtol,
                self.tol[1] if self.tol[1] is not None else atol)  # fmt: skip

    def inputs(self, size: int, dtype: torch.dtype, requires_grad: bool = False, seed: int = 0):
        """The op's reference arguments (fresh tensors each call)."""
        return self.entry.inputs(size, dtype, self.device, requires_grad, seed)

    def cases(self, dtype: torch.dtype, requires_grad: bool = True) -> list[Case]:
        """The other ways the op is called (the slot's cases, or more samples)."""
        slot = [(label, args, self.fn, self.twin)
                for label, args in self.entry.cases(dtype, self.device, requires_grad)]
        return slot + self.extra_cases  # fmt: skip

    def diff(self, args: tuple) -> list[torch.Tensor]:
        """The differentiable arguments of `args`."""
        return [args[i] for i in self.entry.differentiable]

    def with_diff(self, args: tuple, values) -> tuple:
        """`args` with its differentiable arguments replaced by `values`."""
        out = list(args)
        for i, v in zip(self.entry.differentiable, values, strict=True):
            out[i] = v
        return tuple(out)


def line(err: BaseException, limit: int = 300) -> str:
    """`Type: the first line of the message`; a very long line is cut after a sentence."""
    lines = [s.strip() for s in str(err).splitlines() if s.strip()]
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    if len(text) <= limit:
        return text
    end = text.find(". ", 0, limit)
    return text[: end + 1] if end > 0 else text[: limit - 1] + "…"


def compare(got: object, want: torch.Tensor, tol: tuple[float, float],
            mask: torch.Tensor | None = None, at: torch.Tensor | None = None,
            ) -> tuple[bool, str]:  # fmt: skip
    """(within tolerance?, 'max abs err …, max rel err …') of got against want, NaN matching NaN;
    the relative error's denominator is |want| + atol. `mask` limits where they are compared;
    `at`, an input of want's shape, names the worst element by that input's value."""
    rtol, atol = tol
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        kind = f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got)
        return False, f"got {kind}, want {tuple(want.shape)} {want.dtype}"
    g, w = got.detach().double(), want.detach().double()
    x = None if at is None or at.shape != want.shape else at.detach().double()
    if mask is not None:
        g, w = g[mask], w[mask]
        x = None if x is None else x[mask]
    ok = torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    same = (g == w) | (g.isnan() & w.isnan())
    inf = float("inf")
    diff = torch.where(same, 0.0, (g - w).abs()).nan_to_num(nan=inf, posinf=inf)
    rel = torch.where(same, 0.0, diff / (w.abs() + atol)).nan_to_num(nan=inf, posinf=inf)
    detail = (f"max abs err {_max(diff):.3g}, max rel err {_max(rel):.3g} "
              f"(rtol {rtol:g}, atol {atol:g})")  # fmt: skip
    if not ok and diff.numel():
        i = int(diff.flatten().argmax())
        where = "" if x is None else f" at x = {x.flatten()[i].item():g}"
        detail += f"; worst{where}: {g.flatten()[i].item():.6g} vs {w.flatten()[i].item():.6g}"
    return ok, detail


def _max(t: torch.Tensor) -> float:
    return t.max().item() if t.numel() else 0.0
