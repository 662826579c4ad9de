"""The app's pre-check of a user's op: the card's rows (fitting.verdict) for the uses this run
makes of it (fitting.slots.uses), on the slot's samples, before the run writes anything."""

from __future__ import annotations

from collections.abc import Callable

import torch

from fitting.slots import SLOTS
from fitting.verdict import (
    NEEDS,
    RANK,
    CannotRun,
    Sample,
    judge_derivatives,
    judge_training,
    param_names,
    parts_of,
    run_op,
)

TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-3),
       torch.bfloat16: (1.6e-2, 1e-2)}  # rtol, atol: room for a different but right formula


class OpRefused(ValueError):
    """An op that cannot run in its slot, or fails a use the run makes; one line."""


def computes_like(fn: Callable, ref: Callable, sample: Sample, names: list[str], tol) -> bool:
    """Whether fn's forward gives ref's values on the sample as models call it."""
    got, want = (run_op(f, parts_of(sample, names)) for f in (fn, ref))
    if len(got) == 2 or len(want) == 2:  # one raised: judge it against the twin, which says so
        return True
    return all(g.shape == w.shape and torch.allclose(g, w, *tol, equal_nan=True)
               for g, w in zip(got[2], want[2], strict=False))


def precheck(slot: str, fn: Callable, *, device: torch.device | str, dtype: torch.dtype,
             uses: tuple[str, ...] = ("training",), key: str | None = None) -> None:
    """The card's rows for `uses` of a user's op in its slot; OpRefused (one line) when a row is
    wrong or unsupported, or the op cannot run."""
    key, entry = key or f"ops.{slot}", SLOTS[slot]
    samples = entry.samples(dtype, device)
    names, tol = param_names(fn, entry.twin, entry.ours), TOL[dtype]
    # An op that computes the slot's op is judged against its twin; any other op (a silu in the
    # activation slot, say) is its own reference: it must run and differentiate as models call it.
    ref = entry.twin if computes_like(fn, entry.twin, samples[0], names, tol) else fn
    try:
        rows = {"training": judge_training(fn, ref, samples, names, tol)}
        rows |= {use: judge_derivatives(use, fn, ref, samples[0], names, tol)
                 for use in uses if use in NEEDS}
    except CannotRun as err:
        raise OpRefused(f"{key}: {err}") from None
    for use, found in rows.items():
        status, text = max(found, key=lambda f: RANK.index(f[0]))
        if status in ("wrong", "unsupported"):
            also = f"; {NEEDS[use]} needs it" if use in NEEDS else ""
            raise OpRefused(f"{key}: {status} for {use.replace('_', ' ')}: {text}{also} "
                            f"(the card: python -m fitting.opcheck {slot} <your op>)")
