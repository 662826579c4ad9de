"""The app's pre-check of a user's op: the card's rows (uses.py) for the uses this run makes
of it (fitting.slots.uses), on the slot's samples, before the run writes anything."""

import shlex
from collections.abc import Callable
from typing import Any

import torch

from fitting.opcheck.boundary import CannotRun, OpRefused
from fitting.opcheck.uses import NAMES, NEEDS, SURROGATE, judge, slot_case
from fitting.opcheck.verdict import RANK, Finding


def command(slot: str, choice: Any, dtype: torch.dtype, device: torch.device | str) -> str:
    """The card's command line for this op as this run would use it, quoted for a shell."""
    if isinstance(choice, dict):
        choice = "{" + ",".join(f"{k}:{str(v).lower() if isinstance(v, bool) else v}"
                                for k, v in choice.items()) + "}"
    extra = "" if dtype == torch.float32 else f" --dtype {str(dtype).removeprefix('torch.')}"
    extra += "" if torch.device(device).type == "cpu" else f" --device {torch.device(device).type}"
    return f"python -m fitting.opcheck {slot} {shlex.quote(str(choice))}{extra}"


def precheck(slot: str, fn: Callable, *, device: torch.device | str, dtype: torch.dtype,
             uses: tuple[str, ...] = ("training",), key: str | None = None,
             choice: Any = "<your op>") -> str | None:
    """The card's rows for `uses` of a user's op in its slot, judged as the card judges it and
    decided by `decide`: OpRefused (one line) for what it refuses; the run's note line, or None."""
    key, the_card = key or f"ops.{slot}", f" (the card: {command(slot, choice, dtype, device)})"
    try:
        rows = judge(slot_case(slot, fn, dtype, device), uses)
    except CannotRun as err:
        raise OpRefused(f"{key}: {err}{the_card}") from None
    notes = []
    for use, found in rows.items():
        status, action, text = decide(use, found)
        if action == "refuse":
            also = f"; {NEEDS[use]} needs it" if use in NEEDS else ""
            raise OpRefused(f"{key}: {status} for {NAMES[use]}: {text}{also}{the_card}")
        notes += [text] * (action == "note")
    return f"note: {key}: {notes[0]}; the run goes on, its curves show whether it trains the " \
        f"same{the_card}" if notes else None


def decide(use: str, found: list[Finding]) -> tuple[str, str, str]:
    """The card's and the app's one rule for a row: its verdict, what the app does (refuse, note,
    run) and why; the table in docs/ops.md."""
    status, text = max(found, key=lambda f: RANK.index(f[0]))
    wrong = sorted((t for s, t in found if s == "wrong"), key=lambda t: "no gradient" not in t)
    behind = [t for t in wrong if " in place " in t]
    if status == "cannot run" or behind or status in ("wrong", "unsupported") and use != "training":
        return status, "refuse", (behind or [text])[0]
    if wrong:
        return status, "note", f"it differs from its contract: {'; '.join(wrong[:2])}"
    surrogate = [t for s, t in found if SURROGATE in t]
    return status, "note" if surrogate else "run", (surrogate or [text])[0]
