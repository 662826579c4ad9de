"""App-shaped runs for benchmarks and tests of fitting.compare, generated rather than trained.

    python -m fitting.bench.compare_runs DIR [--runs 300] [--steps 5]

Writes a sweep dir shaped like `python train.py -m 'seed=range(N)' steps=S`: job dirs
`<n>_seed=<n>,steps=S` with `.hydra/config.yaml`, `overrides.yaml` and one event file holding
what the app logs: the custom-scalars layout, one event of all scalars per logged step, the
fit figure as a PNG-sized image, the HParams summaries and the final metrics.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from omegaconf import OmegaConf
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter
from torch.utils.tensorboard.summary import custom_scalars, hparams, scalar

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


def main(argv: list[str] | None = None) -> None:
    """Write the sweep dir the arguments ask for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a new dir to write the sweep in")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    generate_sweep(args.dir, args.runs, args.steps)


if __name__ == "__main__":
    main()
