"""`python -m fitting.compare RUNS_DIR [--out DIR]`: compare runs that differ only in their ops."""

import argparse
import os
import sys
import textwrap

from fitting.compare.runs import (
    DONE,
    job,
    pair,
    pairs_table,
    read_runs,
    runs_table,
    shown,
    terminal_table,
    write_differences,
)
from fitting.compare.seeds import RULE, verdict_lines
from fitting.track.files import write_atomic
from fitting.track.tensorboard import DIFF_TAG

PROG = "python -m fitting.compare"
NOTES = """\
- Runs pair when their configs agree on everything but `ops`. The reference is the run whose
  differing ops are `builtin`, else `torch.` functions, else the first in job order.
- final loss: results.json's, else the last `loss/train`; Δ loss vs ref: mine − reference.
  step ms: the run's median step time; × ref and the pairs' ratios: mine / reference.
- max rel. Δloss: over the steps both logged, |mine − ref| / |ref| (TensorBoard's float32).
- peak: `memory/peak_bytes` (tensor bytes of a step: opt-in, once a job in a plain sweep);
  peak RSS: the process's, only where the run had its own (none in a plain sweep).
- status: results.json's (a failed job's with its exit status); "running or killed" if none.
- compare.png: the reference thick and light (over seeds: their median and min–max band),
  each run of mine thin and dashed over it.
- A user's op reads `module:name @<the first 8 hex of its file's sha256>` (results.json's)."""


def write_report(runs: list, root: str, out: str) -> str:
    """Pair `runs` (of `root`); write compare.md, compare.png and differences/ to `out`; the
    text for a terminal: the runs' table, each op's verdict over seeds, where the rest is, the
    jobs that did not complete, the TensorBoard command."""
    from fitting.compare.plot import figure

    pair(runs)
    os.makedirs(out, exist_ok=True)
    png = os.path.join(out, "compare.png")
    write_atomic(png, lambda f: figure(runs).savefig(f, format="png"))
    said, verdicts = write_differences(runs, out, png), verdict_lines(runs)
    md = (f"# Comparison of `{shown(root)}`\n\n## Runs\n\n{runs_table(runs)}\n\n"
          f"## Pairs\n\n{pairs_table(runs)}\n")
    if said:
        md += f"\nmine − reference (differences/, {DIFF_TAG}):\n" + "".join(
            f"- {line}\n" for line in said)
    if verdicts:
        md += f"\n## Trains the same?\n\n{RULE}\n\n" + "".join(f"- {v}\n" for v in verdicts)
    md += f"\n## Notes\n\n{NOTES}\n\n![comparison](compare.png)\n"
    write_atomic(os.path.join(out, "compare.md"), md.encode("utf-8"))
    undone = [f"did not complete: {job(run)} {run.status}" + (  # a failed job: train.py's line
        f" (exit {run.result['exit']}): {run.result.get('reason')}" if "exit" in run.result else "")
        for run in runs if run.status not in DONE]
    wrapped = [textwrap.fill(v, 100, subsequent_indent="    ") for v in verdicts]
    return "\n".join([terminal_table(runs), *wrapped, f"compare.md, compare.png: {shown(out)}",
                      *undone, f"tensorboard --logdir {shown(root)}"]) + "\n"


def report(root: str, out: str | None = None) -> str:
    """Compare the runs under `root`; write the files to `out` (default `root`); the text."""
    runs = read_runs(root)
    if not runs:
        raise FileNotFoundError(f"no run dir (one with .hydra/config.yaml or results.json) in "
                                f"{shown(os.fsdecode(root))}; pass a sweep or run dir of train.py")
    root = os.path.abspath(os.fsdecode(root))
    return write_report(runs, root, os.path.abspath(os.fsdecode(out or root)))


def main(argv: list[str] | None = None) -> int:
    """The command line: 0, or 2 with one line on stderr for what it cannot compare."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", help="a sweep dir, a run dir, or a tree of them")
    parser.add_argument("--out", help="write compare.md, compare.png and differences/ here, "
                        "not into RUNS_DIR")
    args = parser.parse_args(argv)
    try:
        text = report(args.runs_dir, args.out)
    except OSError as err:
        where = f"{shown(os.fsdecode(err.filename))}: " if err.filename else ""
        parser.exit(2, f"{PROG}: error: {where}{err.strerror or err}\n")
    sys.stdout.write(text)
    return 0
