"""Wall time of one 4-job sweep run serially (Hydra's basic launcher) and with joblib.

    python -m fitting.bench.sweep [--task mlp] [--steps 6000] [--runs 2] [--n-jobs 2]

The sweep is `python train.py -m task=TASK impl=custom,builtin seed=0,1 steps=STEPS`, each
job at threads=1; `joblib` adds `hydra/launcher=joblib hydra.launcher.n_jobs=N_JOBS`.
The two commands alternate (which goes first alternates too), `--runs` times each, after one
warm-up of each; the ratio is of the medians. Target on 2 cores: joblib <= 0.75x serial.
Each time comes with the CPU that other processes used meanwhile (in cores, from /proc/stat
less the sweep's own CPU time): on a shared machine they take cores from the sweep. Before
and after, a capacity check times a CPU-bound loop alone and N_JOBS copies at once: the
speedup the machine can give a parallel sweep at that moment (N_JOBS when cores are free).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from fitting.bench.report import DOC, write_section

REPO = Path(__file__).resolve().parents[2]
TARGET = 0.75
JOBS = 4
SPIN = "s = 0\nfor i in range(20_000_000):\n    s += i"


def sweep_command(task: str, steps: int, sweep_dir: Path, n_jobs: int | None) -> list[str]:
    """The 4-job sweep into `sweep_dir`; with `n_jobs`, on the joblib launcher."""
    cmd = [sys.executable, "train.py", "-m", f"task={task}", "impl=custom,builtin", "seed=0,1"]
    cmd += [f"steps={steps}", "threads=1", f"hydra.sweep.dir={sweep_dir}"]
    if n_jobs is not None:
        cmd += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}"]
    return cmd


def busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has been busy since boot (None without /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """User + system CPU seconds of the finished children (and their waited-for children)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Timing(NamedTuple):
    wall: float  # seconds
    cpu: float  # CPU seconds of the sweep, its worker processes included
    others: float | None  # cores that other processes kept busy meanwhile

    def __str__(self) -> str:
        others = "" if self.others is None else f", others {self.others:.2f} cores"
        return f"{self.wall:.2f} s ({self.cpu:.1f} CPU s{others})"


def timed_sweep(cmd: list[str], sweep_dir: Path) -> Timing:
    """Time `cmd` (run in the repo root), checking that all jobs left a run."""
    busy, own = busy_cpu_seconds(), children_cpu_seconds()
    start = time.perf_counter()
    result = subprocess.run(
        cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    wall = time.perf_counter() - start
    after, cpu = busy_cpu_seconds(), children_cpu_seconds() - own
    others = None
    if busy is not None and after is not None:
        others = max(0.0, (after - busy) - cpu) / wall
    if result.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr[-2000:]}")
    runs = list(sweep_dir.glob("*/events.out.tfevents.*"))
    if len(runs) != JOBS:
        raise RuntimeError(f"{sweep_dir}: {len(runs)} runs, expected {JOBS}")
    return Timing(wall, cpu, others)


def parallel_capacity(n: int) -> float:
    """How much faster `n` copies of a CPU-bound loop run at once than one after another."""
    cmd = [sys.executable, "-c", SPIN]
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    alone = time.perf_counter() - start
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd) for _ in range(n)]
    if any(proc.wait() for proc in procs):
        raise RuntimeError("the capacity check's loop failed")
    return n * alone / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Time the serial and the joblib sweep `--runs` times each; print them and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mlp", choices=["poly3", "mlp", "cnn"])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args(argv)
    launchers = {"serial": None, "joblib": args.n_jobs}
    timings: dict[str, list[Timing]] = {name: [] for name in launchers}
    capacity = [parallel_capacity(args.n_jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs + 1):  # run 0 warms file caches and __pycache__
            order = list(launchers) if run % 2 else list(reversed(launchers))
            for name in order:
                sweep_dir = Path(tmp) / f"{name}_{run}"
                cmd = sweep_command(args.task, args.steps, sweep_dir, launchers[name])
                timing = timed_sweep(cmd, sweep_dir)
                if run:
                    timings[name].append(timing)
    capacity.append(parallel_capacity(args.n_jobs))
    med = {name: statistics.median(t.wall for t in ts) for name, ts in timings.items()}
    lines = [f"{JOBS}-job sweep: task={args.task} steps={args.steps}, {os.cpu_count()} cores", ""]
    for name in launchers:
        runs = "; ".join(str(t) for t in timings[name])
        lines.append(f"- {name}: wall median {med[name]:.2f} s; runs: {runs}")
    lines.append(f"- capacity: {args.n_jobs} CPU-bound processes at once ran "
                 f"{capacity[0]:.2f}x (before) and {capacity[1]:.2f}x (after) as fast as one by "
                 f"one ({args.n_jobs}x with free cores)")
    ratio = med["joblib"] / med["serial"]
    verdict = "met" if ratio <= TARGET else "NOT met"
    lines.append(f"- joblib (n_jobs={args.n_jobs}) / serial: {ratio:.2f}x "
                 f"(target <= {TARGET}x: {verdict})")
    print("\n".join(lines))
    command = (f"python -m fitting.bench.sweep --task {args.task} --steps {args.steps} "
               f"--runs {args.runs} --n-jobs {args.n_jobs}")
    write_section(DOC, "sweep", command, "\n".join(lines))
    return {**med, "ratio": ratio}


if __name__ == "__main__":
    main()
