"""The numbers of a comparison: per-run timing, loss and memory; per custom/builtin pair, ratios."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fitting.runs_reader import Run

LOSS = "loss/train"
STEP_MS = "time/step_ms"
SAVED_BYTES = "memory/saved_bytes"
REFERENCE_IMPL = "builtin"
TINY = float(np.finfo(np.float64).tiny)


@dataclass
class RunStats:
    """What the per-run table shows; None where the run lacks the tag."""

    run: Run
    final_loss: float | None
    steps_per_s: float | None
    wall_s: float | None
    saved_bytes: float | None
    timing: str  # where steps/s and wall time come from: "events", "step_ms" or "none"


@dataclass
class PairStats:
    """What the per-pair table shows: `other` (e.g. custom) against the builtin run."""

    other: RunStats
    builtin: RunStats
    common_steps: int
    max_rel_dloss: float | None
    time_ratio: float | None
    bytes_ratio: float | None


def run_stats(run: Run) -> RunStats:
    """Final loss, throughput, wall time and median saved bytes per step of one run."""
    loss = run.scalars.get(LOSS)
    final_loss = float(loss.values[-1]) if loss is not None and len(loss.values) else None
    steps_per_s = wall_s = None
    timing = "none"
    if loss is not None and len(loss.steps) >= 2 and loss.wall[-1] > loss.wall[0]:
        wall_s = float(loss.wall[-1] - loss.wall[0])
        steps_per_s = float(loss.steps[-1] - loss.steps[0]) / wall_s
        timing = "events"
    elif STEP_MS in run.scalars and np.sum(run.scalars[STEP_MS].values) > 0:
        # Too few events (or one wall-clock tick) to time: fall back to the logged step times.
        step_ms = run.scalars[STEP_MS].values
        wall_s = float(np.sum(step_ms)) / 1000.0
        steps_per_s = len(step_ms) / wall_s
        timing = "step_ms"
    saved = run.scalars.get(SAVED_BYTES)
    saved_bytes = None
    if saved is not None and len(saved.values):
        saved_bytes = float(np.median(saved.values))
    return RunStats(run, final_loss, steps_per_s, wall_s, saved_bytes, timing)


def max_rel_dloss(other: Run, builtin: Run) -> tuple[float | None, int]:
    """max over common steps of |l_other - l_builtin| / max(|l_builtin|, tiny), and #steps."""
    a, b = other.scalars.get(LOSS), builtin.scalars.get(LOSS)
    if a is None or b is None:
        return None, 0
    _, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
    if len(ia) == 0:
        return None, 0
    la, lb = a.values[ia], b.values[ib]
    return float(np.max(np.abs(la - lb) / np.maximum(np.abs(lb), TINY))), len(ia)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def pair_stats(other: RunStats, builtin: RunStats) -> PairStats:
    """Ratios other/builtin: time per step, median saved bytes; and the relative loss gap."""
    rel, common = max_rel_dloss(other.run, builtin.run)
    # Seconds per step, so a ratio > 1 means `other` is slower.
    time_ratio = _ratio(builtin.steps_per_s, other.steps_per_s)
    return PairStats(
        other=other,
        builtin=builtin,
        common_steps=common,
        max_rel_dloss=rel,
        time_ratio=time_ratio,
        bytes_ratio=_ratio(other.saved_bytes, builtin.saved_bytes),
    )


def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs grouped by config without `impl` (and volatile keys), in order of first appearance."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.comparison_key(), []).append(run)
    return list(groups.values())


def pair_runs(group: list[Run]) -> tuple[list[tuple[Run, Run]], list[Run]]:
    """(non-builtin, builtin) pairs of one group, matched in name order, and the unpaired rest."""
    builtins = [r for r in group if r.impl == REFERENCE_IMPL]
    others = [r for r in group if r.impl not in (REFERENCE_IMPL, "?")]
    pairs = list(zip(others, builtins, strict=False))
    paired = {id(r) for pair in pairs for r in pair}
    return pairs, [r for r in group if id(r) not in paired]
