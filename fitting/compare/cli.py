"""Compare runs that differ only in their ops: `python -m fitting.compare DIR [--out DIR]`.

Reads the TensorBoard event files of every run under the dir, pairs runs whose configs differ
only in `impl` and `ops.*` (each "mine" against the group's reference run), prints the tables
and writes them to compare.md, with the figure compare.png.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fitting.compare.differences import write_differences
from fitting.compare.pairing import group_runs, pair_runs, repeat_groups
from fitting.compare.plot import plot_comparison
from fitting.compare.rows import MAX_ROWS, Row, choose_rows, describe, make_row
from fitting.compare.runs_reader import Run, RunsError, read_runs
from fitting.compare.stats import (
    LOSS,
    PEAK_BYTES,
    PEAK_RSS,
    SAVED_BYTES,
    STEP_MS,
    TRAIN_S,
    PairStats,
    RunStats,
    pair_stats,
    run_stats,
)

PROG = "python -m fitting.compare"
NA = "n/a"


def _num(value: float | None, fmt: str) -> str:
    return NA if value is None else format(value, fmt)


def _mib(nbytes: float | None) -> float | None:
    return None if nbytes is None else nbytes / 2**20


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def runs_table(stats: list[RunStats]) -> str:
    """The per-run markdown table."""
    header = [
        "run",
        "task",
        "impl",
        "optimizer",
        "status",
        "final loss",
        "steps/s",
        "median step (ms)",
        "saved bytes/step",
        "peak MiB/step",
        "peak RSS MiB",
        "wall time (s)",
    ]
    rows = [
        [
            f"`{s.run.name}`",
            s.run.task,
            s.run.impl,
            s.run.optimizer,
            "finished" if s.run.finished else "running or stopped",
            _num(s.final_loss, ".6g"),
            _num(s.steps_per_s, ".1f"),
            _num(s.step_ms, ".4g"),
            _num(s.saved_bytes, ",.0f"),
            _num(_mib(s.peak_bytes), ",.1f"),
            _num(_mib(s.peak_rss), ",.1f"),
            _num(s.wall_s, ".3f"),
        ]
        for s in stats
    ]
    return _table(header, rows)


def pairs_table(pairs: list[PairStats]) -> str:
    """The per-pair markdown table (ratios are mine/reference)."""
    header = [
        "task",
        "mine",
        "reference",
        "runs (mine / reference)",
        "common steps",
        "max abs(Δloss) relative",
        "time ratio (mine/ref)",
        "saved-bytes ratio (mine/ref)",
        "peak ratio (mine/ref)",
    ]
    rows = [
        [
            p.other.run.task,
            p.other.run.impl,
            p.builtin.run.impl,
            f"`{p.other.run.name}` / `{p.builtin.run.name}`",
            str(p.common_steps),
            _num(p.max_rel_dloss, ".3e"),
            _num(p.time_ratio, ".4f") + (" (wall)" if p.time_basis == "wall" else ""),
            _num(p.bytes_ratio, ".4f"),
            _num(p.peak_ratio, ".4f"),
        ]
        for p in pairs
    ]
    return _table(header, rows)


NOTES = f"""\
- status: finished when the run wrote its HParams session end (completed or converged), else
  running or stopped.
- final loss: the last `{LOSS}` value. steps/s and wall time: from the app's own training
  seconds, the last `{TRAIN_S}` (pauses between a stop and its resume left out); for runs
  without it, from the median `{STEP_MS}` times the steps. median step: the median of
  `{STEP_MS}` (the optimizer step alone).
- saved bytes/step: the median of `{SAVED_BYTES}`.
- peak MiB/step: the highest `{PEAK_BYTES}`, the tensor bytes a step had allocated at once
  above those live at its start (sampled steps); peak RSS: the last `{PEAK_RSS}`, the
  process's resident-memory high-water mark. peak ratio: mine / reference peak MiB/step.
- max abs(Δloss) relative: max over common steps of |l_mine − l_ref| / max(|l_ref|, tiny),
  from TensorBoard's float32 scalars.
- time ratio: mine / reference median step time (> 1: mine is slower); marked (wall) where a
  run lacks `{STEP_MS}` and the ratio is of training seconds per step.
- saved-bytes ratio: mine / reference median saved bytes per step.
- runs pair when their `.hydra/config.yaml` agree on everything but `impl`, `ops.*` and output
  paths. The reference of a pair is the run whose differing op is `builtin`, else a torch
  function (`torch.…`), else the first in the sweep's job order; the other runs are "mine"."""


def _rows_text(rows: list[Row], drawn: list[Row]) -> str:
    """The list of the figure's rows, and of the experiments left out of it."""
    text = "\n".join(f"{i + 1}. {describe(row)}" for i, row in enumerate(drawn))
    left_out = [row for row in rows if row not in drawn]
    if left_out:
        text += (
            f"\n\nNot drawn (the figure has at most {MAX_ROWS} rows, those with pairs first): "
            + "; ".join(f"{row.label} ({len(row.runs)} runs)" for row in left_out)
        )
    return text


def _tables(runs: list[Run], stats: dict[int, RunStats], pairs: list[PairStats],
            unpaired: list[str]) -> str:  # fmt: skip
    tables = f"## Runs\n\n{runs_table([stats[id(r)] for r in runs])}\n\n"
    if pairs:
        tables += f"## Pairs\n\n{pairs_table(pairs)}\n"
    else:
        tables += "## Pairs\n\nNo pairs: no two runs have the same config but for impl and ops.\n"
    if unpaired:
        tables += "\nWithout a partner: " + ", ".join(f"`{n}`" for n in unpaired) + "\n"
    timed_by_step_ms = [s.run.name for s in stats.values() if s.timing == "step_ms"]
    if timed_by_step_ms:
        tables += f"\nTimed from `{STEP_MS}`: " + ", ".join(f"`{n}`" for n in timed_by_step_ms)
        tables += "\n"
    return tables


def figure_rows(groups: list[list[Run]], pairs: dict[int, list[tuple[Run, Run]]]) -> list[Row]:
    """The figure's rows: the comparison groups gathered across seeds, with their pairs (keyed
    by the id of their group)."""
    return [
        make_row(row, [pair for group in row for pair in pairs[id(group)]])
        for row in repeat_groups(groups)
    ]


def report(root: Path, out: Path) -> str:
    """Read the runs under `root`, write compare.md and compare.png to `out`; return the tables."""
    runs = read_runs(root)
    groups = group_runs(runs)
    paired = {id(g): pair_runs(g) for g in groups}
    all_pairs = [pair for g in groups for pair in paired[id(g)][0]]
    unpaired = [r.name for g in groups for r in paired[id(g)][1]]
    stats = {id(r): run_stats(r) for r in runs}
    pairs = [pair_stats(stats[id(o)], stats[id(b)]) for o, b in all_pairs]
    tables = _tables(runs, stats, pairs, unpaired)

    write_differences(root, all_pairs)
    rows = figure_rows(groups, {gid: pairs for gid, (pairs, _) in paired.items()})
    drawn, _ = choose_rows(rows)
    out.mkdir(parents=True, exist_ok=True)
    width, height = plot_comparison(drawn, out / "compare.png")
    (out / "compare.md").write_text(
        f"# Comparison of `{root}`\n\n{tables}\n## Notes\n\n{NOTES}\n\n"
        f"## Figure\n\nRows of compare.png ({width}×{height} px):\n\n{_rows_text(rows, drawn)}"
        "\n\n![comparison](compare.png)\n",
        encoding="utf-8",
    )
    return tables + f"\nFigure rows:\n\n{_rows_text(rows, drawn)}\n"


def main(argv: list[str] | None = None) -> int:
    """The command line; exits 2 with one line on stderr for a dir it can't compare."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=Path, help="a sweep dir, a run dir, or a tree of them")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write compare.md and compare.png (default: RUNS_DIR)",
    )
    args = parser.parse_args(argv)
    try:
        tables = report(args.runs_dir, args.out or args.runs_dir)
    except RunsError as exc:
        parser.exit(2, f"{PROG}: error: {exc}\n")
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        hint = "check the path and its permissions"
        parser.exit(2, f"{PROG}: error: {where}{exc.strerror or exc}; {hint}\n")
    sys.stdout.write(tables)
    print(f"\nwrote {(args.out or args.runs_dir) / 'compare.md'} and compare.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
