"""Where benchmark results go: sections of docs/benchmarks.md and machine-readable CSV files.

Each benchmark command owns one section of docs/benchmarks.md, between the HTML comments
`<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, and rewrites only that section, headed by the
command that produced it; the text around the sections is written by hand. The CSV files carry
one row per op × impl × size × metric, with the machine and software each was measured on, so
runs of two machines or commits compare. Every benchmark runs on glibc malloc as shipped: the
app sets no malloc policy of its own.
"""

from __future__ import annotations

import csv
import os
import platform
import statistics
import subprocess
from datetime import date
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks.md"
CSV_COLUMNS = (
    "suite", "op", "size", "impl", "metric", "median", "p20", "p80",
    "torch", "threads", "cpu", "device", "commit", "date",
)  # fmt: skip


def quantiles(samples: list[float]) -> tuple[float, float, float]:
    """(median, 20th percentile, 80th percentile) of `samples` (all equal for one sample)."""
    if len(samples) < 2:
        return (samples[0],) * 3
    cuts = statistics.quantiles(samples, n=5, method="inclusive")
    return statistics.median(samples), cuts[0], cuts[3]


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """The checkout's commit (short hash, '+dirty' with uncommitted changes), or ''."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
    except OSError:
        return ""
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def malloc_note() -> str:
    """The malloc this process runs on: 'glibc 2.36 malloc as shipped', and any environment
    variable that would change that (MALLOC_*, GLIBC_TUNABLES, LD_PRELOAD), which a table of
    results should name."""
    libc, version = platform.libc_ver()
    name = f"{libc} {version} malloc" if libc else "the C library's malloc"
    tunables = ("GLIBC_TUNABLES", "LD_PRELOAD")
    changed = sorted(k for k in os.environ if k.startswith("MALLOC_") or k in tunables)
    if changed:
        return f"{name}, changed by {', '.join(f'{k}={os.environ[k]}' for k in changed)}"
    return f"{name} as shipped"


def machine(device: str, threads: int | None = None) -> dict:
    """The CSV's context columns for results measured here."""
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads() if threads is None else threads,
        "cpu": cpu_name(),
        "device": device,
        "commit": git_commit(),
        "date": date.today().isoformat(),
    }


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write `rows` (dicts with CSV_COLUMNS keys) to `path`, header first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def write_section(doc: Path, name: str, command: str, body: str) -> None:
    """Replace section `name` of `doc` (appended if missing) with `body` under its command."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = (
        f"{begin}\n<!-- written by `{command}`; edit outside the markers -->\n\n"
        f"Produced by `{command}`:\n\n{body.strip()}\n\n{end}"
    )
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n{block}\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
