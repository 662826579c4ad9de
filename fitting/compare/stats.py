"""The numbers of a comparison: per-run timing, loss and memory; per pair of runs, ratios."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fitting.compare.runs_reader import Run

LOSS = "loss/train"
STEP_MS = "time/step_ms"
TRAIN_S = "time/train_s"
SAVED_BYTES = "memory/saved_bytes"
PEAK_BYTES = "memory/peak_bytes"
PEAK_RSS = "memory/peak_rss_bytes"
TINY = float(np.finfo(np.float64).tiny)


@dataclass
class RunStats:
    """What the per-run table shows; None where the run lacks the tag."""

    run: Run
    final_loss: float | None
    steps_per_s: float | None
    wall_s: float | None
    saved_bytes: float | None
    step_ms: float | None  # median of time/step_ms: the optimizer step alone, no logging
    timing: str  # where steps/s and wall time come from: "train_s", "step_ms" or "none"
    peak_bytes: float | None = None  # highest sampled tensor peak of a step
    peak_rss: float | None = None  # the process's peak RSS at the end (it only grows)


@dataclass
class PairStats:
    """What the per-pair table shows: `other` ("mine") against the reference run."""

    other: RunStats
    builtin: RunStats  # the reference
    common_steps: int
    max_rel_dloss: float | None
    time_ratio: float | None
    time_basis: str  # "step_ms" (median step times), "wall" (training seconds) or "none"
    bytes_ratio: float | None
    peak_ratio: float | None = None  # of the tensor peaks


def run_stats(run: Run) -> RunStats:
    """Final loss, throughput, wall time, median step time and saved bytes of one run."""
    loss = run.scalars.get(LOSS)
    final_loss = float(loss.values[-1]) if loss is not None and len(loss.values) else None
    steps_per_s, wall_s, timing = _timing(run)
    return RunStats(
        run,
        final_loss,
        steps_per_s,
        wall_s,
        _median(run, SAVED_BYTES),
        _median(run, STEP_MS),
        timing,
        _last(run, PEAK_BYTES, max),
        _last(run, PEAK_RSS, lambda values: values[-1]),
    )


def _timing(run: Run) -> tuple[float | None, float | None, str]:
    """(steps/s, training seconds, basis) from the app's own clock, never the events' wall
    times: those include any pause between a stop and its resume."""
    train_s = run.scalars.get(TRAIN_S)
    if train_s is not None and len(train_s.values) and train_s.values[-1] > 0:
        # Steps count from 0: after step k, k + 1 steps have run.
        wall_s = float(train_s.values[-1])
        return float(train_s.steps[-1] + 1) / wall_s, wall_s, "train_s"
    step_ms = run.scalars.get(STEP_MS)
    if step_ms is not None and len(step_ms.values) and np.median(step_ms.values) > 0:
        # Older runs: the median logged step times every step, logging and validation not
        # counted.
        steps_per_s = 1000.0 / float(np.median(step_ms.values))
        return steps_per_s, float(step_ms.steps[-1] + 1) / steps_per_s, "step_ms"
    return None, None, "none"


def _median(run: Run, tag: str) -> float | None:
    series = run.scalars.get(tag)
    return float(np.median(series.values)) if series is not None and len(series.values) else None


def _last(run: Run, tag: str, pick) -> float | None:
    """`pick` of the tag's values (e.g. max, or the last one); None without the tag."""
    series = run.scalars.get(tag)
    return float(pick(series.values)) if series is not None and len(series.values) else None


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
    """Ratios other/reference: time per step, median saved bytes; and the relative loss gap."""
    rel, common = max_rel_dloss(other.run, builtin.run)
    # Time per step, so a ratio > 1 means `other` is slower. The median step time leaves out
    # logging, validation and figures, which cost both impls the same and would dilute it.
    time_ratio, basis = _ratio(other.step_ms, builtin.step_ms), "step_ms"
    if time_ratio is None:
        time_ratio, basis = _ratio(builtin.steps_per_s, other.steps_per_s), "wall"
    return PairStats(
        other=other,
        builtin=builtin,
        common_steps=common,
        max_rel_dloss=rel,
        time_ratio=time_ratio,
        time_basis=basis if time_ratio is not None else "none",
        bytes_ratio=_ratio(other.saved_bytes, builtin.saved_bytes),
        peak_ratio=_ratio(other.peak_bytes, builtin.peak_bytes),
    )


