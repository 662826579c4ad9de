"""Time `python -m fitting.compare` on a large generated sweep: wall time, peak RSS, PNG size.

    python -m fitting.bench.compare_scale [--runs 300] [--steps 5] [--repeats 3] [--keep DIR]

Generates a sweep dir shaped like `python train.py -m 'seed=range(N)' steps=S` with
fitting.bench.compare_runs (generated, not trained: seconds for 300 runs), then runs the
compare command on it in a subprocess `--repeats` times and writes the table into
docs/benchmarks.md. This process imports neither torch nor TensorBoard before it has measured:
a child's peak RSS counts the memory it had from its parent before it started the command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's header."""
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def time_compare(sweep: Path, out: Path) -> tuple[float, float, float]:
    """Wall and CPU seconds of `python -m fitting.compare SWEEP --out OUT`, and its peak RSS
    (MB): the resource usage of that child alone (the generator's children are not counted)."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "fitting.compare", str(sweep), "--out", str(out)]
    child = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    # ru_maxrss is in KiB on Linux.
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024 / 1e6


def main(argv: list[str] | None = None) -> None:
    """Generate the sweep, time the compare command on it, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="a new dir to generate it in")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sweep = args.keep or Path(tmp) / "sweep"
        start = time.perf_counter()
        generator = "fitting.bench.compare_runs"
        steps = ["--runs", str(args.runs), "--steps", str(args.steps)]
        subprocess.run([sys.executable, "-m", generator, str(sweep), *steps], cwd=REPO, check=True)
        generated = time.perf_counter() - start
        timings = [time_compare(sweep, Path(tmp) / "out") for _ in range(args.repeats)]
        walls, cpus = [t[0] for t in timings], [t[1] for t in timings]
        rss = max(t[2] for t in timings)
        width, height = png_size(Path(tmp) / "out" / "compare.png")
    lines = [
        "| runs | steps | wall median (s) | CPU median (s) | wall of each run (s) | peak RSS (MB) "
        "| compare.png |",
        "|---:|---:|---:|---:|---|---:|---|",
        f"| {args.runs} | {args.steps} | {statistics.median(walls):.1f} | "
        f"{statistics.median(cpus):.1f} | " + ", ".join(f"{w:.1f}" for w in walls)
        + f" | {rss:.0f} | {width}×{height} px |",
        "",
        f"Generated {args.runs} app-shaped runs in {generated:.1f} s (not trained), then timed "
        f"`python -m fitting.compare SWEEP --out OUT` {args.repeats} times in a subprocess; "
        "peak RSS is the largest of those processes'.",
    ]
    print("\n".join(lines))
    from fitting.bench.report import DOC, write_section  # imports torch: only once measured

    command = f"python -m fitting.bench.compare_scale --runs {args.runs} --steps {args.steps}"
    write_section(DOC, "compare_scale", command + f" --repeats {args.repeats}", "\n".join(lines))


if __name__ == "__main__":
    main()
