"""The report card of one op: every check in order, as a table and as markdown."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from fitting.opcheck.checks import (
    Check,
    Subject,
    forward_ad,
    gradcheck,
    gradgradcheck,
    parity,
    vmap,
)
from fitting.opcheck.compile_checks import compile_fullgraph, library_opcheck
from fitting.opcheck.cost import cost_alone, cost_in_model
from fitting.opcheck.training import training
from models.ops.choice import ResolvedOp, op_entry

STATUSES = ("pass", "fail", "skip", "info")


@dataclass
class Card:
    """The op (as resolved), how the checks ran, and their results."""

    resolved: ResolvedOp
    setting: str
    checks: list[Check]

    @property
    def failed(self) -> bool:
        """True when any check failed."""
        return any(c.status == "fail" for c in self.checks)


def run_card(
    resolved: ResolvedOp, quick: bool = False, device: str = "cpu", backend: str = "aot_eager"
) -> Card:
    """Run every check of the card on the resolved op against its built-in twin."""
    s = Subject(resolved.op, resolved.spec, resolved.fn, op_entry(resolved.op), quick,
                torch.device(device), backend)  # fmt: skip
    checks = [*parity(s, torch.float32), *parity(s, torch.float64)]
    for check in (gradcheck, gradgradcheck, forward_ad, vmap, compile_fullgraph,
                  library_opcheck, cost_alone, cost_in_model, training):  # fmt: skip
        checks.append(check(s))
    setting = (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}, "
        f"compile backend {backend}{', --quick' if quick else ''}"
    )
    return Card(resolved, setting, checks)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def table(card: Card) -> str:
    """The checks as a markdown table (also readable as plain text)."""
    lines = ["| check | status | detail |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.status} | {_escape(c.detail)} |" for c in card.checks]
    return "\n".join(lines)


def summary(card: Card) -> str:
    """`N pass, N fail, N skip, N info`."""
    counts = {s: sum(c.status == s for c in card.checks) for s in STATUSES}
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def markdown(card: Card, command: str | None = None) -> str:
    """The card as a markdown document: the op, its source, the setting, the table."""
    r = card.resolved
    command = command or "python -m fitting.opcheck " + " ".join(sys.argv[1:])
    lines = [f"# opcheck: `{r.key}`", "", f"`{command}`", "", card.setting]
    if r.source:
        lines += ["", f"source: `{r.source}` (sha256 `{r.sha256}`)"]
    lines += ["", table(card), "", f"**{'FAIL' if card.failed else 'PASS'}**: {summary(card)}"]
    return "\n".join(lines) + "\n"
