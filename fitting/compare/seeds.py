"""Trains the same? An op's runs over seeds against its reference's, by one stated rule (the op
card's training row uses it too)."""

import json
import math
import warnings
from collections.abc import Sequence

import numpy as np

from fitting.compare.runs import (
    DONE,
    FINAL_LOSS,
    RunRecord,
    differing,
    group_key,
    job,
    loss_gap,
    reference,
)

ALPHA = 0.05
RULE = ("identical: each seed's loss/train equals the reference's of the same seed at every step "
        "both logged; else Welch's two-sided t-test on the logs of the final losses over seeds: "
        f"p >= {ALPHA} the same within the seed spread, p < {ALPHA} differs. Under 2 seeds a "
        "side: no spread to judge. A final loss that is not finite (a diverged run): differs.")


def _spread(x: np.ndarray) -> str:
    return (f"{np.median(x):.4g} ({x.min():.4g}–{x.max():.4g}, n={len(x)})" if len(x) > 1 else
            f"{x[0]:.4g} (n=1)" if len(x) else "none")


def trains_same(mine: Sequence[float], ref: Sequence[float], identical: bool) -> tuple[str, str]:
    """RULE on the final losses of mine and the reference over seeds: 'identical', 'same',
    'differs' or 'too few seeds', and in words with each side's median (min–max), their ratio, p."""
    a, b = (np.asarray(x, dtype=np.float64) for x in (mine, ref))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy: one side without spread
        la, lb, few = np.log(a), np.log(b), min(len(a), len(b)) < 2
        finite, p = np.isfinite(la).all() and np.isfinite(lb).all(), math.nan
        if finite and not few:
            from scipy.stats import ttest_ind  # no spread at all: Welch's t is 0/0 or x/0

            p = float(la[0] == lb[0]) if np.ptp(la) == np.ptp(lb) == 0 else float(
                ttest_ind(la, lb, equal_var=False).pvalue)
        ratio = np.median(a) / np.median(b) if len(a) and len(b) else math.nan
    text = (f"final loss median {_spread(a)} vs the reference's {_spread(b)}; ratio of medians "
            f"{ratio:.4g}; Welch p={'n/a' if math.isnan(p) else format(p, '.2g')}")
    if not finite:  # even where the curves agree at every step the reference logged
        return "differs", f"differs: a final loss is not finite (a diverged run); {text}"
    if identical:
        return "identical", f"identical: every seed's curve is the reference's; {text}"
    if few:
        return "too few seeds", f"no spread to judge (sweep seed=0,1,2,3,4); {text}"
    return ("same", f"the same within the seed spread; {text}") if p >= ALPHA else (
        "differs", f"differs (p < {ALPHA}); {text}")


def experiments(runs: list[RunRecord]) -> list[list[RunRecord]]:
    """The runs (after `pair`) by experiment: alike but for ops and seed; those with pairs first."""
    found: dict[str, list[RunRecord]] = {}
    for run in runs:
        found.setdefault(group_key(run, "seed"), []).append(run)
    return sorted(found.values(), key=lambda row: all(r.reference is None for r in row))


def judged(row: list[RunRecord]) -> list[tuple[list[RunRecord], str | None, list[str]]]:
    """An experiment's op choices, the reference's first: (their runs, 'ref' or trains_same's
    verdict, a line per slot where the choice differs from the reference's: it, their jobs, the
    verdict); (runs, None, []) each where no run has a reference."""
    slots, groups = differing(row), {}  # not all ops: a run that never ended has every slot's
    for run in row:
        groups.setdefault(json.dumps([run.ops.get(s) for s in slots]), []).append(run)
    if len(groups) < 2:
        return [(group, None, []) for group in groups.values()]
    ref = groups.pop(json.dumps([reference(row).ops.get(s) for s in slots]))
    counted = (*DONE, "diverged")  # not a run stopped early: its last loss is no final loss

    def jobs(runs: list[RunRecord]) -> str:
        return " ".join(map(job, runs))

    def finals(runs: list[RunRecord]) -> list[float]:
        return [math.nan if r.status == "diverged" else loss for r in runs
                if r.status in counted and (loss := r.number(*FINAL_LOSS)) is not None]

    def same_curve(run: RunRecord) -> bool:  # as the reference's run of its seed, at every step
        mine = any(run.reference is r for r in ref)
        steps, gap, _ = loss_gap(run, run.reference) if mine else ([], 0, 0)
        return len(steps) > 0 and not np.any(gap)

    out: list[tuple[list[RunRecord], str | None, list[str]]] = [(ref, "ref", [])]
    for group in groups.values():
        done, ops = [r for r in group if r.status in counted], group[0].ops
        verdict, text = trains_same(finals(group), finals(ref), bool(done) and all(
            map(same_curve, done)))
        mine = [s for s in slots if ops.get(s) != ref[0].ops.get(s)]
        lines = []
        for s in mine:  # a line per slot: slots changed together share their runs' verdict
            theirs, others = ref[0].ops.get(s), ", ".join(o for o in mine if o != s)
            together = f", changed with {others}" if others else ""
            which = (f"; which slot: sweep ops.{s}={ops[s]},{theirs} alone"
                     if others and verdict == "differs" else "")
            lines.append(f"{s}={ops[s]} [{jobs(group)}] vs {theirs} [{jobs(ref)}]{together}: "
                         f"{text}{which}")
        out.append((group, verdict, lines))
    return out


def verdict_lines(runs: list[RunRecord]) -> list[str]:
    """A line per slot of each op choice with a reference (after `pair`): judged's."""
    return [line for row in experiments(runs) for _, verdict, lines in judged(row)[1:] if verdict
            for line in lines]
