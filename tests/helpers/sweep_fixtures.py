"""Synthetic Hydra job dirs shaped like train.py's: `.hydra/` configs plus one event file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter

T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parents[2]


def job_config(impl: str, task: str = "poly3", optimizer: str = "sgd", lr: float = 5e-6) -> dict:
    """A config.yaml as the app composes it (the keys fitting.compare relies on, and some more)."""
    return {
        "task": {"name": task, "n_points": 2000},
        "optimizer": {"name": optimizer, "lr": lr, "momentum": 0.0},
        "impl": impl,
        "steps": 20,
        "seed": 0,
        "device": "cpu",
        "dtype": "float32",
        "log": {"every": 1, "val_every": 5},
    }


def write_job(
    job_dir: Path,
    config: dict,
    overrides: list[str],
    losses: np.ndarray,
    step_s: float,
    saved_bytes: int,
    params: dict[str, np.ndarray] | None = None,
    wall_step: bool = True,
    busy: float | None = 0.8,
) -> Path:
    """Write one job dir; step k's events get wall time T0 + k * step_s (unless not wall_step).

    time/step_ms is `busy` of step_s (step 0 a slow warm-up); with busy=None it isn't logged.
    """
    hydra_dir = job_dir / ".hydra"
    hydra_dir.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), hydra_dir / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), hydra_dir / "overrides.yaml")
    writer = SummaryWriter(log_dir=str(job_dir))
    for step, loss in enumerate(losses):
        wall = T0 + step * step_s if wall_step else T0
        writer.add_scalar("loss/train", float(loss), step, walltime=wall)
        writer.add_scalar("memory/saved_bytes", saved_bytes, step, walltime=wall)
        if busy is not None:
            step_ms = step_s * 1000.0 * (busy if step else 20.0)
            writer.add_scalar("time/step_ms", step_ms, step, walltime=wall)
        writer.add_scalar("optim/grad_norm", 1.0 / (step + 1), step, walltime=wall)
        for name, values in (params or {}).items():
            writer.add_scalar(f"params/{name}", float(values[step]), step, walltime=wall)
        if step % 5 == 0:
            writer.add_scalar("loss/val", float(loss) * 1.1, step, walltime=wall)
    writer.close()
    return job_dir


def poly3_losses(n: int, scale: float = 1.0) -> np.ndarray:
    """A decaying loss curve."""
    return scale * 1000.0 * np.exp(-0.3 * np.arange(n)) + 1.0


def poly3_params(n: int, shift: float = 0.0) -> dict[str, np.ndarray]:
    """Trajectories for params/a..d that drift towards sin's Legendre fit."""
    t = 1.0 - np.exp(-0.2 * np.arange(n))
    return {
        "a": 0.0 + shift * t,
        "b": -1.0 + (0.86 + shift) * t,
        "c": 0.0 + shift * t,
        "d": 0.3 + (0.13 + shift) * t,
    }


def write_sweep(root: Path, n: int = 20) -> dict[str, Path]:
    """A multirun dir: poly3 custom/builtin (a pair) and an unpartnered mlp custom run."""
    return {
        "custom": write_job(
            root / "0_impl=custom",
            job_config("custom"),
            ["impl=custom"],
            poly3_losses(n, scale=1.001),
            step_s=0.003,
            saved_bytes=48_000,
            params=poly3_params(n, shift=1e-3),
        ),
        "builtin": write_job(
            root / "1_impl=builtin",
            job_config("builtin"),
            ["impl=builtin"],
            poly3_losses(n),
            step_s=0.002,
            busy=0.5,
            saved_bytes=64_000,
            params=poly3_params(n),
        ),
        "mlp": write_job(
            root / "2_impl=custom,task=mlp",
            job_config("custom", task="mlp"),
            ["impl=custom", "task=mlp"],
            poly3_losses(n, scale=0.01),
            step_s=0.01,
            saved_bytes=1_000_000,
        ),
    }


def run_train_sweep(sweep_dir: Path, *overrides: str) -> None:
    """The real app: `python train.py -m impl=custom,builtin steps=50 OVERRIDES` into sweep_dir."""
    sweep = ["-m", "impl=custom,builtin", "steps=50", f"hydra.sweep.dir={sweep_dir}"]
    cmd = [sys.executable, "train.py", *sweep, *overrides]
    result = subprocess.run(
        cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{cmd} failed:\n{result.stderr[-4000:]}"


def tensorboard_run_names(sweep_dir: Path) -> dict[str, str]:
    """impl -> the run name TensorBoard gives each job's event file (its dir under sweep_dir);
    runs that are not a job's (the sweep's differences) are left out."""
    names = {}
    for event_file in sweep_dir.rglob("events.out.tfevents.*"):
        job_dir = next((p for p in event_file.parents if (p / ".hydra").is_dir()), None)
        if job_dir is None:
            continue
        config = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
        names[str(config.impl)] = event_file.parent.relative_to(sweep_dir).as_posix()
    return names
