"""Time `python -m fitting.compare` on a large generated sweep: wall time, peak RSS, PNG size.

    python -m fitting.bench.compare_scale [--runs 300] [--steps 5] [--repeats 3] [--keep DIR]

Generates a sweep dir shaped like `python train.py -m 'seed=range(N)' steps=S` (job dirs
`<n>_seed=<n>,steps=S` with `.hydra/config.yaml`, `overrides.yaml` and one event file holding
what the app logs: the custom-scalars layout, one event of all scalars per logged step, the
fit figure as a PNG-sized image, the HParams summaries and the final metrics), then runs the
compare command on it in a subprocess `--repeats` times and writes the table into
docs/benchmarks.md. The runs are generated, not trained: writing 300 takes seconds.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter
from torch.utils.tensorboard.summary import custom_scalars, hparams, scalar

from fitting.bench.report import DOC, write_section

REPO = Path(__file__).resolve().parents[2]
FIGURE_BYTES = 40_000  # the size of the app's fit figure of a poly3 run, as PNG


def app_config(seed: int, steps: int, impl: str = "custom") -> dict:
    """A poly3 run's `.hydra/config.yaml` as the app composes it (the ops follow impl)."""
    init = {"a": 0.0, "b": -1.0, "c": 0.0, "d": 0.3}
    return {
        "task": {"name": "poly3", "n_points": 2000, "x_min": -3.14159, "x_max": 3.14159,
                 "init": init},
        "optimizer": {"name": "gd", "lr": 5e-6, "stop": {"patience": 0, "rtol": None}},
        "impl": impl,
        "ops": {op: "${impl}" for op in ("linear", "activation", "conv_bn", "legendre_p3")},
        "steps": steps, "seed": seed, "device": "auto", "dtype": "float32", "threads": 1,
        "log": {"every": 10, "hist_every": 100, "figure_every": 1000, "val_every": 100},
        "ckpt": {"every": 500}, "on_nonfinite": "stop", "resume": None,
    }  # fmt: skip


def step_scalars(step: int, rng: random.Random, step_ms: float, train_s: float) -> dict:
    """The scalars the app logs at one logged step of a poly3 run."""
    t = 1.0 - 0.9 ** (step + 1)
    return {
        "params/a": 0.01 * t, "params/b": -1.0 + 0.86 * t, "params/c": 0.01 * t,
        "params/d": 0.3 + 0.13 * t, "loss/train": 1000.0 * 0.9**step + 9.0 + rng.random(),
        "optim/grad_norm": 100.0 * 0.9**step, "memory/saved_bytes": 48_000.0,
        "memory/peak_rss_bytes": 3.2e8, "memory/peak_bytes": 1.6e5,
        "time/step_ms": step_ms, "time/train_s": train_s,
    }  # fmt: skip


def _summaries(seed: int, steps: int, figure_bytes: int) -> list[tuple[int, Summary]]:
    """(step, summary) of each event the app writes for a run, after the file version."""
    rng = random.Random(seed)
    layout = custom_scalars({"loss": {"loss/train": ["Multiline", ["^loss/train$"]]}})
    out = [(0, layout)]
    for step in sorted({*range(0, steps, 10), steps - 1}):
        values = step_scalars(step, rng, 2.0 + rng.random(), (step + 1) * 0.0025)
        record = Summary(value=[v for tag, x in values.items() for v in scalar(tag, x).value])
        out.append((step, record))
    png = Summary.Image(height=480, width=640, colorspace=4,
                        encoded_image_string=rng.randbytes(figure_bytes))  # fmt: skip
    out.append((steps, Summary(value=[Summary.Value(tag="fit", image=png)])))
    hp = {"impl": "custom", "seed": seed, "steps": steps, "task": "poly3"}
    out += [(0, summary) for summary in hparams(hp, {"final/loss": 0.0, "final/step_ms": 0.0})]
    for tag in ("final/loss", "final/step_ms", "final/saved_bytes", "final/steps"):
        out.append((steps, scalar(tag, rng.random())))
    return out


def write_events(job: Path, seed: int, steps: int, figure_bytes: int = FIGURE_BYTES) -> None:
    """One event file as the app writes it for a run of `steps` steps (its framing by
    TensorBoard's own record writer, without the app's writer thread)."""
    wall = 1_700_000_000.0 + seed
    name = f"events.out.tfevents.{int(wall)}.bench.{seed}.0"
    with open(job / name, "wb") as f:
        writer = RecordWriter(f)
        writer.write(Event(wall_time=wall, file_version="brain.Event:2").SerializeToString())
        for step, summary in _summaries(seed, steps, figure_bytes):
            event = Event(wall_time=wall + 0.01 * step, step=step, summary=summary)
            writer.write(event.SerializeToString())


def generate_sweep(
    root: Path, runs: int, steps: int, figure_bytes: int = FIGURE_BYTES
) -> list[Path]:
    """Write `runs` job dirs of a `seed=range(runs) steps=<steps>` sweep under `root` (a
    smaller `figure_bytes` writes them faster)."""
    jobs = []
    for seed in range(runs):
        job = root / f"{seed}_seed={seed},steps={steps}"
        (job / ".hydra").mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(app_config(seed, steps)), job / ".hydra" / "config.yaml")
        overrides = OmegaConf.create([f"seed={seed}", f"steps={steps}"])
        OmegaConf.save(overrides, job / ".hydra" / "overrides.yaml")
        write_events(job, seed, steps, figure_bytes)
        jobs.append(job)
    return jobs


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's header."""
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def time_compare(sweep: Path, out: Path) -> tuple[float, float]:
    """Wall seconds of `python -m fitting.compare SWEEP --out OUT` and the peak RSS (MB) of the
    children so far (this process starts no other)."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "fitting.compare", str(sweep), "--out", str(out)]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    # ru_maxrss is in KiB on Linux.
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e6


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
        generate_sweep(sweep, args.runs, args.steps)
        generated = time.perf_counter() - start
        timings = [time_compare(sweep, Path(tmp) / "out") for _ in range(args.repeats)]
        walls, rss = [wall for wall, _ in timings], timings[-1][1]
        width, height = png_size(Path(tmp) / "out" / "compare.png")
    lines = [
        "| runs | steps | wall median (s) | wall of each run (s) | peak RSS (MB) | compare.png |",
        "|---:|---:|---:|---|---:|---|",
        f"| {args.runs} | {args.steps} | {statistics.median(walls):.1f} | "
        + ", ".join(f"{w:.1f}" for w in walls)
        + f" | {rss:.0f} | {width}×{height} |",
        "",
        f"Generated {args.runs} app-shaped runs in {generated:.1f} s (not trained), then timed "
        f"`python -m fitting.compare SWEEP --out OUT` {args.repeats} times in a subprocess; "
        "peak RSS is the largest of those processes'.",
    ]
    print("\n".join(lines))
    command = f"python -m fitting.bench.compare_scale --runs {args.runs} --steps {args.steps}"
    write_section(DOC, "compare_scale", command + f" --repeats {args.repeats}", "\n".join(lines))


if __name__ == "__main__":
    main()
