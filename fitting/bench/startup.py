"""Whole-process wall time of the default `python train.py` against bare torch scripts.

    python -m fitting.bench.startup [--runs 5]

Runs, interleaved and `--runs` times each (the median is reported):
- app: `python train.py` with the default config (the run dir goes to a temporary directory):
  poly3 with optimizer=gd, logging every 10th step to TensorBoard, figures at steps 1000
  and 2000;
- bare-manual: the tutorial's loop, `p -= lr * p.grad` by hand, nothing logged: the
  reference the app is reported against (reported, not a target);
- bare-optim: the same loop stepped by torch.optim.SGD with a closure, for comparison: the
  first torch.optim optimizer imports torch._dynamo, seconds of CPU.
The app's CPU time leaves out its figure-drawing worker: the worker is forked from
multiprocessing's fork server, a process the app does not wait for (fitting/track/tb_logging.py).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fitting.bench.report import DOC, write_section

REPO = Path(__file__).resolve().parents[2]

_SETUP = """
import math, torch
from models.ops import legendre_p3
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)
a, b, c, d = (torch.tensor(v, requires_grad=True) for v in (0.0, -1.0, 0.0, 0.3))
"""

BARE_OPTIM = _SETUP + """
opt = torch.optim.SGD([a, b, c, d], lr=5e-6)
def closure():
    opt.zero_grad()
    loss = (a + b * legendre_p3(c + d * x) - y).pow(2).sum()
    loss.backward()
    return loss
for t in range(2000):
    loss = opt.step(closure)
print(loss.item())
"""

BARE_MANUAL = _SETUP + """
for t in range(2000):
    loss = (a + b * legendre_p3(c + d * x) - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= 5e-6 * p.grad
            p.grad = None
print(loss.item())
"""


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds from launch to exit of `cmd` (run in the repo root, output discarded) and
    the CPU seconds (user + system) it used, which a busy machine disturbs less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Time the three commands `--runs` times each, print medians and the app/bare ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cmds = {
            "app": [sys.executable, "train.py", f"hydra.run.dir={tmp}/run"],
            "bare-optim": [sys.executable, "-c", BARE_OPTIM],
            "bare-manual": [sys.executable, "-c", BARE_MANUAL],
        }
        walls: dict[str, list[float]] = {name: [] for name in cmds}
        cpus: dict[str, list[float]] = {name: [] for name in cmds}
        for cmd in cmds.values():  # warm-up: file caches, __pycache__
            timed(cmd)
        for _ in range(args.runs):
            for name, cmd in cmds.items():
                wall, cpu = timed(cmd)
                walls[name].append(wall)
                cpus[name].append(cpu)
    lines = report(walls, cpus)
    print("\n".join(lines))
    command = f"python -m fitting.bench.startup --runs {args.runs}"
    write_section(DOC, "startup", command, "\n".join(lines))
    return {name: statistics.median(ts) for name, ts in walls.items()}


def report(walls: dict[str, list[float]], cpus: dict[str, list[float]]) -> list[str]:
    """The table of each command's runs and the app/bare ratios, as Markdown lines.

    Besides the ratio of the medians, the median of each round's ratio: the commands of a
    round run one after the other, so a slow spell of the machine slows both sides of it."""
    wall_med = {name: statistics.median(ts) for name, ts in walls.items()}
    cpu_med = {name: statistics.median(ts) for name, ts in cpus.items()}
    lines = ["| command | wall median (s) | CPU median (s) | wall of each run (s) |",
             "|---|---:|---:|---|"]
    for name, ts in walls.items():
        runs = ", ".join(f"{t:.2f}" for t in ts)
        lines.append(f"| {name} | {wall_med[name]:.2f} | {cpu_med[name]:.2f} | {runs} |")
    lines.append("")
    for bare in ("bare-optim", "bare-manual"):
        per_round = statistics.median(a / b for a, b in zip(walls["app"], walls[bare], strict=True))
        lines.append(f"- app / {bare}: wall {wall_med['app'] / wall_med[bare]:.2f}x "
                     f"(median of the rounds' ratios {per_round:.2f}x), "
                     f"CPU {cpu_med['app'] / cpu_med[bare]:.2f}x")
    return lines


if __name__ == "__main__":
    main()
