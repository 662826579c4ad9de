"""The rows of compare.png: comparison groups gathered across seeds, their variants (one per
choice of ops) and what the report says about each row, including those left out."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fitting.compare.events import Series
from fitting.compare.runs_reader import Run

MAX_ROWS = 5


@dataclass
class Variant:
    """The runs of one row with the same op choices (one per seed): drawn as one curve."""

    label: str
    runs: list[Run]
    reference: bool = False


@dataclass
class Row:
    """One row of the figure: runs that differ only in their ops and seed, and their pairs."""

    label: str
    variants: list[Variant]
    pairs: list[tuple[Run, Run]] = field(default_factory=list)  # (mine, reference)

    @property
    def runs(self) -> list[Run]:
        """Every run of the row."""
        return [run for variant in self.variants for run in variant.runs]

    @property
    def seeds(self) -> int:
        """How many runs each variant has at most (one per seed)."""
        return max(len(v.runs) for v in self.variants)


def _own_overrides(run: Run, leave_out: tuple[str, ...]) -> list[str]:
    # Sweep presets (+experiment=…) say how the sweep was launched, not what differs.
    own = ("impl=", "ops.", "task=", "experiment=", *leave_out)
    return [o for o in run.overrides if not o.lstrip("+~").startswith(own)]


def group_label(group: list[Run], leave_out: tuple[str, ...] = ()) -> str:
    """A row title: task, optimizer and the group's own overrides other than impl and ops."""
    run = group[0]
    extra = _own_overrides(run, leave_out)
    return f"{run.task} · {run.optimizer}" + (f" · {','.join(extra)}" if extra else "")


def make_row(groups: list[list[Run]], pairs: list[tuple[Run, Run]]) -> Row:
    """The row of comparison groups that differ only in seed, given their pairs."""
    runs = [run for group in groups for run in group]
    reference = pairs[0][1].choices if pairs else None
    by_choice: dict[str, Variant] = {}
    for run in runs:
        key = repr(sorted(run.choices.items()))
        if key not in by_choice:
            by_choice[key] = Variant(run.impl, [], run.choices == reference)
        by_choice[key].runs.append(run)
    # The reference first: drawn first, under the others.
    variants = sorted(by_choice.values(), key=lambda v: not v.reference)
    label = group_label(groups[0], ("seed=",) if len(groups) > 1 else ())
    return Row(label, variants, pairs)


def describe(row: Row) -> str:
    """What a row shows, in words: its reference, its other runs, and how seeds are drawn."""
    parts = []
    for variant in row.variants:
        role = "reference" if variant.reference else ("mine" if row.pairs else "run")
        names = ", ".join(f"`{r.name}`" for r in variant.runs[:3])
        more = f" and {len(variant.runs) - 3} more" if len(variant.runs) > 3 else ""
        parts.append(f"{role} {variant.label} ({names}{more})")
    text = f"{row.label}: " + "; ".join(parts)
    if row.seeds > 1:
        seeds = sorted({str(r.config.get("seed", "?")) for r in row.runs}, key=_natural)
        text += (
            f". {len(seeds)} seeds ({', '.join(seeds[:5])}{', …' if len(seeds) > 5 else ''}) "
            "grouped: each curve is their median, its band their min–max"
        )
    return text


def _natural(text: str) -> tuple:
    return (0, int(text), "") if text.lstrip("-").isdigit() else (1, 0, text)


def choose_rows(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """The rows to draw (at most MAX_ROWS, those with pairs first, in order) and the rest."""
    ranked = sorted(range(len(rows)), key=lambda i: (not rows[i].pairs, i))
    drawn = sorted(ranked[:MAX_ROWS])
    return [rows[i] for i in drawn], [rows[i] for i in range(len(rows)) if i not in drawn]


def band(runs: list[Run], tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, median, min, max) of `tag` over `runs` at the steps all of them logged."""
    series: list[Series] = [r.scalars[tag] for r in runs if tag in r.scalars]
    if not series:
        empty = np.zeros(0)
        return empty, empty, empty, empty
    steps = series[0].steps
    for s in series[1:]:
        steps = np.intersect1d(steps, s.steps, assume_unique=True)
    values = np.vstack([s.values[np.searchsorted(s.steps, steps)] for s in series])
    return steps, np.median(values, axis=0), values.min(axis=0), values.max(axis=0)
