"""The app's pre-check of a user's op: the card's rows (fitting.uses) for the uses this run makes
of it (fitting.slots.uses), on the slot's samples, before the run writes anything."""

import shlex
from collections.abc import Callable
from typing import Any

import torch

from fitting.boundary import CannotRun
from fitting.slots import OpRefused
from fitting.uses import NAMES, NEEDS, decide, judge, slot_case


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
    """The card's rows for `uses` of a user's op in its slot, against the slot's twin where it
    computes the twin (approximately or exactly), else itself, decided as the card decides
    (fitting.uses.decide): OpRefused (one line) for what it refuses; the run's note line, or
    None."""
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
