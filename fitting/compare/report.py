"""`python -m fitting.compare RUNS_DIR [--out DIR]`: compare runs that differ only in their ops.

Pairs each run with its reference (the `builtin` run, else a `torch.` function, else the first
job), prints the per-run and per-pair tables, writes compare.md, compare.png and the
mine − reference runs (differences/) to RUNS_DIR, or all of them to DIR when given.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from fitting.compare.runs import (
    SAVED_BYTES,
    STEP_MS,
    fmt,
    loss_gap,
    markdown,
    pair,
    read_runs,
    runs_table,
    shown,
    write_differences,
)

PROG = "python -m fitting.compare"
PEAK = ("peak_bytes", "memory/peak_bytes", max)
PEAK_RSS = ("peak_rss_bytes", "memory/peak_rss_bytes")
NOTES = """\
- Runs pair when their configs agree on everything but `ops`. The reference is the run whose
  differing ops are `builtin`, else `torch.` functions, else the first in job order.
- final loss: results.json's, else the last `loss/train`; Δ loss vs ref: mine − reference.
  step ms: the run's median step time; × ref and the pairs' ratios: mine / reference.
- max rel. Δloss: over the steps both logged, |mine − ref| / |ref| (TensorBoard's float32).
- peak: `memory/peak_bytes` (tensor bytes of a step, opt-in), peak RSS: the process's.
- status: results.json's; "running or killed" where the run wrote none.
- compare.png: the reference thick and light, mine thin and dashed; the runs of several seeds
  as a median with a min–max band."""


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b; None where either is missing or b is 0."""
    return None if a is None or not b else a / b


def pairs_table(runs: list) -> str:
    """The per-pair markdown table (after `pair`): loss gap and mine / reference ratios."""
    rows = []
    for mine in (r for r in runs if r.reference is not None):
        ref = mine.reference
        steps, gap, ref_loss = loss_gap(mine, ref)
        rel = np.max(np.abs(gap) / np.maximum(np.abs(ref_loss), 1e-300)) if len(steps) else None
        rows.append([f"`{shown(mine.name)}`", f"`{shown(ref.name)}`", str(len(steps)),
                     fmt(rel, ".3e")] + [fmt(ratio(mine.number(*k), ref.number(*k)), ".4f")
                                         for k in (STEP_MS, SAVED_BYTES, PEAK, PEAK_RSS)])
    header = ["mine", "reference", "common steps", "max rel. Δloss", "step time ×",
              "saved bytes ×", "peak ×", "peak RSS ×"]
    return markdown(header, rows) if rows else "No pairs: no two runs differ only in their ops."


def write_atomic(path: str, write: Callable[[BinaryIO], object]) -> None:
    """`write` a temporary file beside `path`, then rename it over `path`: a failure or a kill
    leaves the old file whole, never a truncated one."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def report(root: str, out: str | None = None) -> str:
    """Compare the runs under `root`; write the files to `out` (default `root`); the text."""
    from fitting.compare.plot import figure

    runs = read_runs(root)
    if not runs:
        raise FileNotFoundError(f"no run dir (one with .hydra/config.yaml or results.json) in "
                                f"{shown(os.fsdecode(root))}; pass a sweep or run dir of train.py")
    pair(runs)
    out = os.path.abspath(os.fsdecode(out or root))
    os.makedirs(out, exist_ok=True)
    said = write_differences(runs, out)
    tables = f"## Runs\n\n{runs_table(runs)}\n\n## Pairs\n\n{pairs_table(runs)}\n"
    if said:
        tables += "\nmine − reference (differences/, loss/train_diff):\n" + "".join(
            f"- {line}\n" for line in said)
    md = (f"# Comparison of `{shown(os.path.abspath(os.fsdecode(root)))}`\n\n{tables}\n"
          f"## Notes\n\n{NOTES}\n\n![comparison](compare.png)\n")
    write_atomic(os.path.join(out, "compare.png"), lambda f: figure(runs).savefig(f, format="png"))
    write_atomic(os.path.join(out, "compare.md"), lambda f: f.write(md.encode("utf-8")))
    return f"{tables}\nwrote {shown(os.path.join(out, 'compare.md'))} and compare.png\n"


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
