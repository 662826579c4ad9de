"""The numbers of a comparison: per-run timing, loss and memory; per custom/builtin pair, ratios."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fitting.compare.runs_reader import Run

LOSS = "loss/train"
STEP_MS = "time/step_ms"
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
    timing: str  # where steps/s and wall time come from: "events", "step_ms" or "none"
    peak_bytes: float | None = None  # highest sampled tensor peak of a step
    peak_rss: float | None = None  # the process's peak RSS at the end (it only grows)


@dataclass
class PairStats:
    """What the per-pair table shows: `other` (e.g. custom) against the builtin run."""

    other: RunStats
    builtin: RunStats
    common_steps: int
    max_rel_dloss: float | None
    time_ratio: float | None
    time_basis: str  # "step_ms" (median step times) or "wall" (event wall times) or "none"
    bytes_ratio: float | None
    peak_ratio: float | None = None  # of the tensor peaks


def run_stats(run: Run) -> RunStats:
    """Final loss, throughput, wall time, median step time and saved bytes of one run."""
    loss = run.scalars.get(LOSS)
    final_loss = float(loss.values[-1]) if loss is not None and len(loss.values) else None
    steps_per_s = wall_s = None
    timing = "none"
    if loss is not None and len(loss.steps) >= 2 and loss.wall[-1] > loss.wall[0]:
        wall_s = float(loss.wall[-1] - loss.wall[0])
        steps_per_s = float(loss.steps[-1] - loss.steps[0]) / wall_s
        timing = "events"
    elif STEP_MS in run.scalars and np.mean(run.scalars[STEP_MS].values) > 0:
        # Too few events (or one wall-clock tick) to time: fall back to the logged step times,
        # which with log.every > 1 cover only every few steps.
        s = run.scalars[STEP_MS]
        steps_per_s = 1000.0 / float(np.mean(s.values))
        wall_s = float(s.steps[-1] - s.steps[0] + 1) / steps_per_s
        timing = "step_ms"
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
    """Ratios other/builtin: time per step, median saved bytes; and the relative loss gap."""
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


def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs grouped by config without `impl` and `ops` (and volatile keys), in order of first
    appearance."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.comparison_key(), []).append(run)
    return list(groups.values())


def pair_runs(group: list[Run]) -> tuple[list[tuple[Run, Run]], list[Run]]:
    """(other, reference) pairs of one group and the unpaired rest. The references are the runs
    with the most built-in ops (impl=builtin, or the most ops.<op>=builtin); one reference
    pairs with every other run, several pair with the others in name order."""
    known = [r for r in group if not r.impl.startswith("?")]
    most = max((r.builtin_ops for r in known), default=0)
    refs = [r for r in known if r.builtin_ops == most and most > 0]
    others = [r for r in known if r.builtin_ops < most]
    if len(refs) == 1:
        pairs = [(other, refs[0]) for other in others]
    else:
        pairs = list(zip(others, refs, strict=False))
    paired = {id(r) for pair in pairs for r in pair}
    return pairs, [r for r in group if id(r) not in paired]
