"""compare.png: per comparison group, loss curves, parameter trajectories and custom - builtin."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fitting.compare.runs_reader import Run, Series
from fitting.compare.stats import LOSS, TINY

VAL_LOSS = "loss/val"
MAX_PARAM_TAGS = 8
COLUMNS = (
    "loss (log scale)",
    "parameters (or weight norms)",
    "custom − builtin: loss / |builtin loss|",
    "custom − builtin: parameters (or weight norms)",
)


def param_tags(run: Run) -> list[str]:
    """The run's `params/*` tags (poly3), else its `weight_norm/*` ones (mlp, cnn); a few."""
    for prefix in ("params/", "weight_norm/"):
        tags = sorted(t for t in run.scalars if t.startswith(prefix))
        if tags:
            return tags[:MAX_PARAM_TAGS]
    return []


def group_label(group: list[Run]) -> str:
    """A row title: task, optimizer and the group's own overrides other than impl and ops."""
    run = group[0]
    # Sweep presets (+experiment=…) say how the sweep was launched, not what differs.
    own = ("impl=", "ops.", "task=", "experiment=")
    extra = [o for o in run.overrides if not o.lstrip("+~").startswith(own)]
    return f"{run.task} · {run.optimizer}" + (f" · {','.join(extra)}" if extra else "")


def _common(a: Series, b: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
    return steps, a.values[ia], b.values[ib]


def _style(run: Run) -> dict[str, object]:
    if run.impl == "builtin":
        return {"linestyle": "--", "linewidth": 1.6}
    return {"linestyle": "-", "linewidth": 1.0}


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def _plot_row(axes, group: list[Run], pairs: list[tuple[Run, Run]]) -> None:
    ax_loss, ax_par, ax_dloss, ax_dpar = axes
    for i, run in enumerate(group):
        color = f"C{i}"
        if LOSS in run.scalars:
            s = run.scalars[LOSS]
            ax_loss.plot(s.steps, s.values, color=color, label=f"{run.impl} train", **_style(run))
        if VAL_LOSS in run.scalars:
            s = run.scalars[VAL_LOSS]
            ax_loss.plot(
                s.steps, s.values, color=color, marker=".", linestyle=":", label=f"{run.impl} val"
            )
        for j, tag in enumerate(param_tags(run)):
            s = run.scalars[tag]
            label = f"{tag.rsplit('/', 1)[-1]} ({run.impl})"
            ax_par.plot(s.steps, s.values, color=f"C{j}", label=label, **_style(run))
    ax_loss.set_yscale("log")
    for ax in (ax_loss, ax_par):
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
        else:
            _empty(ax, "no such tags")

    for other, builtin in pairs:
        if LOSS in other.scalars and LOSS in builtin.scalars:
            steps, lo, lb = _common(other.scalars[LOSS], builtin.scalars[LOSS])
            rel = (lo - lb) / np.maximum(np.abs(lb), TINY)
            ax_dloss.plot(steps, rel, color="k", label=f"{other.impl} − {builtin.impl}")
        for j, tag in enumerate(param_tags(other)):
            if tag in builtin.scalars:
                steps, po, pb = _common(other.scalars[tag], builtin.scalars[tag])
                ax_dpar.plot(steps, po - pb, color=f"C{j}", label=tag.rsplit("/", 1)[-1])
    for ax in (ax_dloss, ax_dpar):
        gaps = [np.max(np.abs(line.get_ydata()), initial=0.0) for line in ax.lines]
        if gaps:
            ax.text(
                0.02,
                0.97,
                f"max |Δ| = {max(gaps):.3g}",
                transform=ax.transAxes,
                va="top",
                fontsize=8,
            )
        ax.axhline(0.0, color="grey", linewidth=0.5)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        if not pairs:
            _empty(ax, "no run with the same config and more built-in ops")
        elif len(ax.lines) > 1:
            ax.legend(fontsize=7, ncol=2)


def plot_comparison(
    groups: list[list[Run]], pairs: list[list[tuple[Run, Run]]], path: Path
) -> None:
    """Write the figure: one row per group of comparable runs, four panels per row."""
    # Lazy: matplotlib is slow to import and only this function needs it; the Agg canvas
    # renders without a display and leaves pyplot's global backend alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * len(COLUMNS), 3.3 * len(groups)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_2d(fig.subplots(len(groups), len(COLUMNS), squeeze=False))
    for row, (group, group_pairs) in enumerate(zip(groups, pairs, strict=True)):
        _plot_row(axes[row], group, group_pairs)
        for col, title in enumerate(COLUMNS):
            title = f"{group_label(group)}: {title}" if col == 0 else title
            axes[row][col].set_title(title, fontsize=9)
            axes[row][col].set_xlabel("step", fontsize=8)
            axes[row][col].tick_params(labelsize=7)
    fig.savefig(path, dpi=100)
