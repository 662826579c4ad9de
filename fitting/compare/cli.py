"""Compare custom and built-in ops run by run: `python -m fitting.compare DIR [--out DIR]`.

Reads the TensorBoard event files of every run under the dir, pairs runs whose configs differ
only in `impl` and `ops.*` (each against the run with the most built-in ops), prints the tables
and writes them to compare.md, with the figure compare.png.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fitting.compare.plot import group_label, plot_comparison
from fitting.compare.runs_reader import RunsError, read_runs
from fitting.compare.stats import (
    LOSS,
    PEAK_BYTES,
    PEAK_RSS,
    SAVED_BYTES,
    STEP_MS,
    PairStats,
    RunStats,
    group_runs,
    pair_runs,
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
    """The per-pair markdown table (ratios are other/builtin)."""
    header = [
        "task",
        "comparison",
        "runs (custom / builtin)",
        "common steps",
        "max abs(Δloss) relative",
        "time ratio (c/b)",
        "saved-bytes ratio (c/b)",
        "peak ratio (c/b)",
    ]
    rows = [
        [
            p.other.run.task,
            f"{p.other.run.impl} / {p.builtin.run.impl}",
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
- final loss: the last `{LOSS}` value. steps/s and wall time: from the event wall times of
  `{LOSS}` (first to last step, logging included), or from the mean of `{STEP_MS}` where the
  events can't time it. median step: the median of `{STEP_MS}` (the optimizer step alone).
- saved bytes/step: the median of `{SAVED_BYTES}`.
- peak MiB/step: the highest `{PEAK_BYTES}`, the tensor bytes a step had allocated at once
  above those live at its start (sampled steps); peak RSS: the last `{PEAK_RSS}`, the
  process's resident-memory high-water mark. peak ratio: custom / builtin peak MiB/step.
- max abs(Δloss) relative: max over common steps of |l_custom − l_builtin| / max(|l_builtin|,
  tiny), from TensorBoard's float32 scalars.
- time ratio: custom / builtin median step time (> 1: custom is slower); marked (wall) where a
  run lacks `{STEP_MS}` and the ratio is of seconds per step from the event wall times.
- saved-bytes ratio: custom / builtin median saved bytes per step.
- runs pair when their `.hydra/config.yaml` agree on everything but `impl`, `ops.*` and output
  paths; the reference of a pair is the run with the most built-in ops."""


def report(root: Path, out: Path) -> str:
    """Read the runs under `root`, write compare.md and compare.png to `out`; return the tables."""
    runs = read_runs(root)
    groups = group_runs(runs)
    paired = [pair_runs(g) for g in groups]
    group_pairs = [group_pair for group_pair, _ in paired]
    unpaired = [r.name for _, rest in paired for r in rest]
    stats = {id(r): run_stats(r) for r in runs}
    pairs = [pair_stats(stats[id(o)], stats[id(b)]) for gp in group_pairs for o, b in gp]

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

    out.mkdir(parents=True, exist_ok=True)
    plot_comparison(groups, group_pairs, out / "compare.png")
    rows = "\n".join(f"{i + 1}. {group_label(g)}" for i, g in enumerate(groups))
    (out / "compare.md").write_text(
        f"# impl comparison of `{root}`\n\n{tables}\n## Notes\n\n{NOTES}\n\n"
        f"## Figure\n\nRows of compare.png:\n\n{rows}\n\n![comparison](compare.png)\n",
        encoding="utf-8",
    )
    return tables


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
