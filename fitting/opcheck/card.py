"""The report card of one op: every check in order, a verdict per use, as a table and as
markdown. Every check runs in a guarded thread: an op that exits or hangs ends the card."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fitting.opcheck.checks import cases, gradcheck, parity
from fitting.opcheck.compile_checks import compile_fullgraph, library_opcheck
from fitting.opcheck.cost import cost_alone, cost_in_model
from fitting.opcheck.subject import STATUSES, USES, Check, Subject
from fitting.opcheck.training import training
from fitting.opcheck.transforms import forward_ad, gradgradcheck, vmap
from models.ops.choice import OPS, ResolvedOp
from models.ops.guard import OpAborted, call_guarded

# Seconds one check of the card may take. The pre-check (30 s) catches an op that hangs on
# every call first; this bounds one that hangs in one check only, and leaves room for the
# longest real check (gradgradcheck of conv_bn makes thousands of calls).
CALL_TIMEOUT = 300.0


class CardAborted(Exception):
    """The op (or its reference) exited, hung, or could not be run by a check."""


@dataclass
class Card:
    """The op (as resolved), its reference, how the checks ran, and their results."""

    resolved: ResolvedOp
    setting: str
    checks: list[Check]
    ref: ResolvedOp | None = None

    @property
    def failed(self) -> bool:
        """True when any check found the op wrong."""
        return any(c.status == "wrong" for c in self.checks)


def _no_model(s: Subject) -> list[Check]:
    why = "no slot, so no model to train with this op (name a slot to compare training)"
    return [Check("cost in a model", "skip", why), Check("training", "skip", why, "training")]


def _guarded(s: Subject, check: Callable, *args) -> list[Check]:
    try:
        found = call_guarded(check, s, *args, timeout=CALL_TIMEOUT)
    except OpAborted as err:
        raise CardAborted(f"{_who(s)}: {err} (in the card's {check.__name__} check)") from None
    except Exception as err:
        raise CardAborted(f"{_who(s)}: the card's {check.__name__} check could not run it: "
                          f"{type(err).__name__}: {err}".splitlines()[0]) from None  # fmt: skip
    return found if isinstance(found, list) else [found]


def _who(s: Subject) -> str:
    key = f"ops.{s.op}={s.spec}" if s.op in OPS else f"{s.op} {s.spec}"
    return f"{key} (against {s.ref_spec})"


def run_card(s: Subject, ref: ResolvedOp | None, resolved: ResolvedOp) -> Card:
    """Run every check of the card on the subject against its reference."""
    dtypes = [s.dtype] + ([torch.float64] if s.dtype != torch.float64 else [])
    checks = [c for dtype in dtypes for c in _guarded(s, parity, dtype)]
    checks += _guarded(s, cases, s.dtype)
    for check in (gradcheck, gradgradcheck, forward_ad, vmap, compile_fullgraph,
                  library_opcheck, cost_alone):  # fmt: skip
        checks += _guarded(s, check)
    if s.op in OPS:
        checks += _guarded(s, cost_in_model) + _guarded(s, training)
    else:
        checks += _no_model(s)
    tol = "".join(f", --{n} {v:g}" for n, v in zip(("rtol", "atol"), s.tol, strict=True)
                  if v is not None)  # fmt: skip
    setting = (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {s.device}, "
        f"compile backend {s.backend}, reference {s.ref_spec}, dtype "
        f"{str(s.dtype).removeprefix('torch.')}{tol}{', --quick' if s.quick else ''}"
    )
    return Card(resolved, setting, checks, ref)


def verdicts(card: Card) -> list[tuple[str, str, str]]:
    """(use, pass | wrong | unsupported | skip, why) for each use of USES."""
    found = []
    for use, label in USES.items():
        rows = [c for c in card.checks if c.use == use]
        worst = next((c for status in ("wrong", "unsupported") for c in rows
                      if c.status == status), None)  # fmt: skip
        if worst:
            found.append((label, worst.status, f"{worst.name}: {worst.detail}"))
        elif any(c.status == "pass" for c in rows):
            passed = [c.name for c in rows if c.status == "pass"]
            why = ", ".join(passed) if len(passed) <= 2 else f"all {len(passed)} checks pass"
            found.append((label, "pass", why))
        else:
            found.append((label, "skip", rows[0].detail if rows else "not checked"))
    return found


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def table(card: Card) -> str:
    """The checks as a markdown table (also readable as plain text)."""
    lines = ["| check | status | detail |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.status} | {_escape(c.detail)} |" for c in card.checks]
    return "\n".join(lines)


def verdict_table(card: Card) -> str:
    """The graded verdict, one row per use."""
    lines = ["| use | verdict | why |", "|---|---|---|"]
    lines += [f"| {u} | {v} | {_escape(why)} |" for u, v, why in verdicts(card)]
    return "\n".join(lines)


def summary(card: Card) -> str:
    """`N pass, N wrong, N unsupported, N skip, N info`."""
    counts = {s: sum(c.status == s for c in card.checks) for s in STATUSES}
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def title(card: Card) -> str:
    """How the card names the op: `ops.<slot>=<spec>`, or `any <spec>`."""
    r = card.resolved
    return r.key if r.op in OPS else f"{r.op} {r.spec}"


def markdown(card: Card, command: str | None = None) -> str:
    """The card as a markdown document: the op, its source, the setting, the tables."""
    r = card.resolved
    command = command or "python -m fitting.opcheck " + " ".join(sys.argv[1:])
    lines = [f"# opcheck: `{title(card)}`", "", f"`{command}`", "", card.setting]
    for who, res in (("source", r), ("reference source", card.ref)):
        if res is not None and res.source:
            lines += ["", f"{who}: `{res.source}` (sha256 `{res.sha256}`)"]
    lines += ["", table(card), "", "Verdict:", "", verdict_table(card), "",
              f"**{'WRONG' if card.failed else 'PASS'}**: {summary(card)}"]  # fmt: skip
    return "\n".join(lines) + "\n"
