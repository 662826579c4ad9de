"""compare.png: one row per experiment (its seeds grouped), four panels per row: the loss, the
parameters (or weight norms), and how far "mine" is from the reference in each."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fitting.compare.rows import Row, Variant, band
from fitting.compare.runs_reader import Run
from fitting.compare.stats import LOSS, TINY

VAL_LOSS = "loss/val"
MAX_PARAM_TAGS = 8
PARAM_PREFIXES = ("params/", "weight_norm/", "norms/weight/")
COLUMNS = ("loss", "parameters", "Δ loss", "Δ parameters")
WIDTH_IN, ROW_IN, DPI = 16.0, 3.8, 100
FONT = {"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "legend.fontsize": 9,
        "xtick.labelsize": 9, "ytick.labelsize": 9, "figure.titlesize": 11}  # fmt: skip
MINE_DASHES = ("--", ":", "-.")
# The reference is drawn thick and light, "mine" thin and dashed on top: where the two
# coincide, both stay visible.
REFERENCE_STYLE = {"linewidth": 4.5, "alpha": 0.35, "linestyle": "-"}


def param_tags(run: Run) -> list[str]:
    """The run's `params/*` tags (poly3), else its weight-norm ones (mlp, cnn); a few."""
    for prefix in PARAM_PREFIXES:
        tags = sorted(t for t in run.scalars if t.startswith(prefix))
        if tags:
            return tags[:MAX_PARAM_TAGS]
    return []


def _style(variant: Variant, mine_index: int) -> dict[str, object]:
    if variant.reference:
        return dict(REFERENCE_STYLE)
    return {"linewidth": 1.4, "linestyle": MINE_DASHES[mine_index % len(MINE_DASHES)]}


def _draw(ax, runs: list[Run], tag: str, color: str, label: str, style: dict) -> None:
    """The median of `tag` over `runs` as a line, their min–max as a band when several."""
    steps, median, low, high = band(runs, tag)
    if len(steps) == 0:
        return
    ax.plot(steps, median, color=color, label=label, **style)
    if len(runs) > 1:
        ax.fill_between(steps, low, high, color=color, alpha=0.15, linewidth=0)


def _legend_below(ax, ncol: int = 2) -> None:
    """The axes' legend under it, outside the data; long labels in fewer columns, so that the
    legend is no wider than its panel."""
    from matplotlib.transforms import offset_copy

    labels = ax.get_legend_handles_labels()[1]
    if labels:
        ncol = max(1, min(ncol, 64 // max(len(label) + 6 for label in labels)))
        # Anchored in points below the axes, clear of the tick labels and the x label whatever
        # the axes' height.
        below = offset_copy(ax.transAxes, ax.figure, y=-34, units="points")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below,
                  ncol=ncol, frameon=False)  # fmt: skip


def _empty(ax, text: str) -> None:
    """A panel with nothing to draw: the reason instead of a blank or flat plot."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def _curves(ax_loss, ax_par, row: Row) -> None:
    """Loss and parameter curves of each variant: color by variant (loss) or by parameter."""
    mine = 0
    for i, variant in enumerate(row.variants):
        role = "ref" if variant.reference else ("mine" if row.pairs else "run")
        style = _style(variant, mine)
        mine += not variant.reference
        _draw(ax_loss, variant.runs, LOSS, f"C{i}", f"{role}: {variant.label}", style)
        steps, median, _, _ = band(variant.runs, VAL_LOSS)
        if len(steps):
            ax_loss.plot(steps, median, "o", color=f"C{i}", markersize=3.5, alpha=0.8)
        for j, tag in enumerate(param_tags(variant.runs[0])):
            name = tag.rsplit("/", 1)[-1] if i == 0 else None
            _draw(ax_par, variant.runs, tag, f"C{j}", name, style)
    if any(VAL_LOSS in r.scalars for r in row.runs):
        ax_loss.plot([], [], "o", color="grey", markersize=3.5, label="dots: loss/val")
    ax_loss.set_yscale("log")
    ax_loss.set_ylabel("loss (log scale)")
    tags = param_tags(row.runs[0])
    ax_par.set_ylabel("weight norm" if tags and not tags[0].startswith("params/") else "value")
    _legend_below(ax_loss, 1)
    _legend_below(ax_par, 4)
    if not ax_par.lines:
        _empty(ax_par, "no parameter tags")


def _gaps(pairs: list[tuple[Run, Run]], tag: str, relative: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per common step, the largest |mine − reference| of `tag` over the pairs (relative to
    |reference| if asked)."""
    worst: dict[int, float] = {}
    for mine, ref in pairs:
        if tag not in mine.scalars or tag not in ref.scalars:
            continue
        a, b = mine.scalars[tag], ref.scalars[tag]
        steps, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
        gap = np.abs(a.values[ia] - b.values[ib])
        if relative:
            gap = gap / np.maximum(np.abs(b.values[ib]), TINY)
        for step, g in zip(steps.tolist(), gap.tolist(), strict=True):
            worst[step] = max(g, worst.get(step, 0.0))
    steps = np.array(sorted(worst), dtype=np.int64)
    return steps, np.array([worst[s] for s in steps.tolist()])


def _gap_panel(ax, row: Row, tags: list[str], relative: bool) -> None:
    """|mine − reference| per step on a log scale; a panel whose gap is zero says so instead."""
    what = "|mine − ref| / |ref|" if relative else "|mine − ref|"
    ax.set_ylabel(what + (" (max over pairs)" if len(row.pairs) > 1 else ""))
    if not row.pairs:
        _empty(ax, "no pair: no run with the same\nconfig but other ops")
        return
    steps_seen, largest = 0, 0.0
    for j, tag in enumerate(tags):
        steps, gap = _gaps(row.pairs, tag, relative)
        steps_seen = max(steps_seen, len(steps))
        largest = max(largest, float(gap.max(initial=0.0)))
        if np.any(gap > 0):
            label = None if relative else tag.rsplit("/", 1)[-1]
            ax.plot(steps[gap > 0], gap[gap > 0], color="k" if relative else f"C{j}",
                    marker=".", linewidth=1.0, label=label)  # fmt: skip
    if not steps_seen:
        _empty(ax, "no common steps")
    elif largest == 0.0:
        _empty(ax, f"mine = reference exactly\nat all {steps_seen} common steps")
    else:
        _gap_scale(ax)
        ax.set_title(f"{ax.get_title()}: max {largest:.3g}")
        _legend_below(ax, 4)


def _gap_scale(ax) -> None:
    """Log scale for gaps over more than a decade; else linear, each tick written in full
    (no offset or multiplier text above the axes, where the title is)."""
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    gaps = np.concatenate([line.get_ydata() for line in ax.get_lines()])
    if gaps.max() > 10 * gaps.min():
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))


def _draw_row(subfig, row: Row) -> None:
    axes = subfig.subplots(1, len(COLUMNS))
    for ax, title in zip(axes, COLUMNS, strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
    _curves(axes[0], axes[1], row)
    _gap_panel(axes[2], row, [LOSS], relative=True)
    _gap_panel(axes[3], row, param_tags(row.runs[0]), relative=False)
    seeds = f" · {row.seeds} seeds: median, band min–max" if row.seeds > 1 else ""
    subfig.suptitle(row.label + seeds, fontweight="bold")


def draw_figure(rows: list[Row]):
    """The figure (a matplotlib Figure on an Agg canvas): one row of four panels per Row."""
    # Lazy: matplotlib is slow to import and only the figure needs it; the Agg canvas
    # renders without a display and leaves pyplot's global backend alone.
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(FONT):
        fig = Figure(figsize=(WIDTH_IN, ROW_IN * max(len(rows), 1)), dpi=DPI,
                     layout="constrained")  # fmt: skip
        FigureCanvasAgg(fig)
        if not rows:
            fig.text(0.5, 0.5, "no runs", ha="center")
        subfigs = np.atleast_1d(fig.subfigures(len(rows), 1)) if rows else []
        for subfig, row in zip(subfigs, rows, strict=True):
            _draw_row(subfig, row)
        fig.canvas.draw()  # lays it out under the same fonts
    return fig


def plot_comparison(rows: list[Row], path: Path) -> tuple[int, int]:
    """Write the figure of `rows` (callers pass at most rows.MAX_ROWS) as a PNG; its size in px."""
    fig = draw_figure(rows)
    fig.savefig(path, dpi=DPI)
    width, height = fig.canvas.get_width_height()
    return int(width), int(height)
