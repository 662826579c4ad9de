"""compare.png: a row per experiment (its seeds together): the reference's training loss as a
band over seeds, each run of the other op choices over it, and how far each is from it."""

from functools import reduce

import numpy as np

from fitting.compare.runs import RunRecord, differing, loss_gap, shown
from fitting.compare.seeds import experiments, judged

MAX_ROWS = 6
# The reference thick and light, mine thin and dashed on top: where they coincide, both show.
REFERENCE = {"linewidth": 5.0, "alpha": 0.35, "linestyle": "-"}
MINE = [{"linewidth": 1.4, "linestyle": dash} for dash in ("--", ":", "-.")]


def _draw(ax, series: list, style: dict, label: str, color: str) -> bool:
    """The median of `series` at the steps all of them logged as a line, their min–max as a band
    when several; False if empty."""
    series = [(s, v) for s, v in series if len(s)]
    if not series:
        return False
    steps = reduce(np.intersect1d, [s for s, _ in series])
    values = np.vstack([np.asarray(v)[np.intersect1d(s, steps, return_indices=True)[1]]
                        for s, v in series])
    ax.plot(steps, np.median(values, axis=0), color=color, label=label, **style)
    if len(series) > 1:
        ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=color, alpha=0.15,
                        linewidth=0)
    return len(steps) > 0


def _say(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def _row(ax_loss, ax_gap, row: list[RunRecord]) -> None:
    judgements, slots = judged(row), differing(row)
    refs, gaps = judgements[0][1] == "ref", False
    for i, (group, verdict, _) in enumerate(judgements):
        choices = ", ".join(f"{s}={group[0].ops.get(s)}" for s in slots) or "all runs alike"
        label = shown(("ref: " if verdict == "ref" else "") + choices +
                      (f": {verdict}" if verdict not in (None, "ref") else ""))
        losses = [r.scalars.get("loss/train", ([], [])) for r in group]
        if verdict == "ref":  # the reference's seeds as a band, each of mine drawn over it
            _draw(ax_loss, losses, REFERENCE, label, f"C{i}")
        for j, (steps, values) in enumerate([] if verdict == "ref" else losses):
            ax_loss.plot(steps, values, color=f"C{i}", label=None if j else label,
                         **MINE[(i - refs) % len(MINE)])
        pairs = [loss_gap(r, r.reference) for r in group if r.reference is not None]
        rel = [(s, np.abs(g) / np.maximum(np.abs(v), 1e-300)) for s, g, v in pairs]
        if any(np.any(g > 0) for _, g in rel):
            gaps |= _draw(ax_gap, rel, MINE[(i - refs) % len(MINE)], label, f"C{i}")
    first = row[0].result
    title = f"{first.get('task', '')} {first.get('optimizer', '')}".strip() or shown(row[0].name)
    seeds = len(judgements[0][0])
    ax_loss.set_title(f"{title}: loss/train" + (f" (reference: median, min–max of {seeds} seeds)"
                                                if refs and seeds > 1 else ""), fontsize=10)
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


def figure(runs: list[RunRecord]):
    """The comparison figure (a matplotlib Figure): a row of two panels per experiment."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no display, no pyplot
    from matplotlib.figure import Figure

    drawn = experiments(runs)[:MAX_ROWS]
    fig = Figure(figsize=(12, 3.2 * max(len(drawn), 1)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(len(drawn), 1), 2, squeeze=False)
    for (ax_loss, ax_gap), row in zip(axes, drawn, strict=False):
        _row(ax_loss, ax_gap, row)
        for ax in (ax_loss, ax_gap):
            ax.set_xlabel("step")
    return fig
