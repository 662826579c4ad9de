"""compare.png: a row per experiment (its seeds together): each op choice's training loss, and
how far each is from the reference's."""

from __future__ import annotations

import json
from functools import reduce

import numpy as np

from fitting.compare.runs import Run, differing, group_key, loss_gap, shown

MAX_ROWS = 6
# The reference thick and light, mine thin and dashed on top: where they coincide, both show.
REFERENCE = {"linewidth": 5.0, "alpha": 0.35, "linestyle": "-"}
MINE = [{"linewidth": 1.4, "linestyle": dash} for dash in ("--", ":", "-.")]


def rows(runs: list[Run]) -> list[list[Run]]:
    """The runs (after `pair`) by experiment: alike but for ops and seed; those with pairs first."""
    found: dict[str, list[Run]] = {}
    for run in runs:
        found.setdefault(group_key(run, "seed"), []).append(run)
    return sorted(found.values(), key=lambda row: all(r.reference is None for r in row))


def _band(series: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """(steps, median, min, max) over `series` at the steps all of them logged."""
    steps = reduce(np.intersect1d, [s for s, _ in series])
    values = np.vstack([np.asarray(v)[np.intersect1d(s, steps, return_indices=True)[1]]
                        for s, v in series])
    return steps, np.median(values, axis=0), values.min(axis=0), values.max(axis=0)


def _draw(ax, series: list, style: dict, label: str, color: str) -> bool:
    """The median of `series` as a line, their min–max as a band when several; False if empty."""
    series = [(s, v) for s, v in series if len(s)]
    if not series:
        return False
    steps, median, low, high = _band(series)
    ax.plot(steps, median, color=color, label=label, **style)
    if len(series) > 1:
        ax.fill_between(steps, low, high, color=color, alpha=0.15, linewidth=0)
    return len(steps) > 0


def _say(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def _row(ax_loss, ax_gap, row: list[Run]) -> None:
    refs = {json.dumps(r.reference.ops) for r in row if r.reference is not None}
    variants: dict[str, list[Run]] = {}
    for run in sorted(row, key=lambda r: json.dumps(r.ops) not in refs):  # the reference first
        variants.setdefault(json.dumps(run.ops), []).append(run)
    slots = differing(row)
    gaps = False
    for i, (key, group) in enumerate(variants.items()):
        ref = key in refs
        choices = ", ".join(f"{s}={group[0].ops.get(s)}" for s in slots) or "all runs alike"
        label = ("ref: " if ref else "") + shown(choices)
        style = REFERENCE if ref else MINE[(i - bool(refs)) % len(MINE)]  # the reference is 0
        losses = [r.scalars.get("loss/train", ([], [])) for r in group]
        _draw(ax_loss, losses, style, label, f"C{i}")
        pairs = [loss_gap(r, r.reference) for r in group if r.reference is not None]
        rel = [(s, np.abs(g) / np.maximum(np.abs(v), 1e-300)) for s, g, v in pairs]
        if any(np.any(g > 0) for _, g in rel):
            gaps |= _draw(ax_gap, rel, style, label, f"C{i}")
    first = row[0].result
    title = f"{first.get('task', '')} {first.get('optimizer', '')}".strip() or shown(row[0].name)
    seeds = max(len(group) for group in variants.values())
    ax_loss.set_title(f"{title}: loss/train" + (f" ({seeds} seeds: median, min–max)"
                                                if seeds > 1 else ""), fontsize=10)
    ax_gap.set_title("|mine − reference| / |reference|", fontsize=10)
    ax_loss.set_yscale("log")
    ax_loss.legend(fontsize=8)
    if gaps:
        ax_gap.legend(fontsize=8)
    elif not refs:
        _say(ax_gap, "no reference: no other run differs only in its ops")
    else:
        _say(ax_gap, "mine = reference at every common step"
             if any(len(loss_gap(r, r.reference)[0]) for r in row if r.reference)
             else "missing: no step logged by both")


def figure(runs: list[Run]):
    """The comparison figure (a matplotlib Figure): a row of two panels per experiment."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no display, no pyplot
    from matplotlib.figure import Figure

    drawn = rows(runs)[:MAX_ROWS]
    fig = Figure(figsize=(12, 3.2 * max(len(drawn), 1)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(len(drawn), 1), 2, squeeze=False)
    for (ax_loss, ax_gap), row in zip(axes, drawn, strict=False):
        _row(ax_loss, ax_gap, row)
        for ax in (ax_loss, ax_gap):
            ax.set_xlabel("step")
    return fig
