"""The app's pre-check of a user's op: the card's rows (uses.py) for the uses this run makes
of it (fitting.slots.uses), on the slot's samples, before the run writes anything."""

import shlex
from collections.abc import Callable
from typing import Any

import torch

from fitting.opcheck.boundary import CannotRun, OpRefused
from fitting.opcheck.uses import NAMES, NEEDS, judge, slot_case
from fitting.opcheck.verdict import RANK


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
             choice: Any = "<your op>") -> None:
    """The card's rows for `uses` of a user's op in its slot, against the slot's twin where it
    computes the twin, else itself; OpRefused (one line) when a row is wrong or unsupported, or
    the op cannot run."""
    key, the_card = key or f"ops.{slot}", f" (the card: {command(slot, choice, dtype, device)})"
    try:
        rows = judge(slot_case(slot, fn, dtype, device), uses)
    except CannotRun as err:
        raise OpRefused(f"{key}: {err}{the_card}") from None
    for use, found in rows.items():
        status, text = max(found, key=lambda f: RANK.index(f[0]))
        if status in ("wrong", "unsupported"):
            also = f"; {NEEDS[use]} needs it" if use in NEEDS else ""
            raise OpRefused(f"{key}: {status} for {NAMES[use]}: {text}{also}{the_card}")
