"""Job dirs written as train.py writes them now: all of a logged step's scalars in one event,
`time/train_s`, op choices under `ops.<slot>`, and the HParams session end of a finished run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from tensorboard.compat.proto.summary_pb2 import Summary
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams, scalar

from tests.helpers.sweep_fixtures import T0, job_config, poly3_losses

SLOTS = ("linear", "activation", "conv_bn", "legendre_p3")


def ops_config(impl: str = "custom", **chosen: object) -> dict:
    """A config with `impl` and the given op choices (the other ops follow impl)."""
    return {**job_config(impl), "ops": {slot: chosen.get(slot, "${impl}") for slot in SLOTS}}


def write_app_job(
    job_dir: Path,
    config: dict,
    overrides: list[str],
    losses: np.ndarray | None = None,
    step_ms: float = 2.0,
    pause_s: float = 0.0,
    finished: bool = True,
    log_step_ms: bool = True,
) -> Path:
    """One job dir; step k took `step_ms`, and the event wall time of every step from the middle
    on is `pause_s` later (a stop and a resume) while `time/train_s` leaves the pause out."""
    losses = poly3_losses(10) if losses is None else losses
    (job_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), job_dir / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), job_dir / ".hydra" / "overrides.yaml")
    with SummaryWriter(log_dir=str(job_dir)) as writer:
        for step, loss in enumerate(losses):
            values = {
                "params/a": 0.1 * step,
                "loss/train": float(loss),
                "memory/saved_bytes": 48_000.0,
                "time/step_ms": step_ms,
                "time/train_s": (step + 1) * step_ms / 1000.0,
            }
            if not log_step_ms:
                del values["time/step_ms"]
            summaries = [scalar(tag, value) for tag, value in values.items()]
            for summary in summaries[1:]:
                summaries[0].value.extend(summary.value)
            paused = pause_s if step >= len(losses) // 2 else 0.0
            wall = T0 + (step + 1) * step_ms / 1000.0 + paused
            writer.file_writer.add_summary(summaries[0], step, walltime=wall)
        if finished:
            for summary in hparams({"impl": str(config.get("impl"))}, {"score/loss": 0.0}):
                writer.file_writer.add_summary(summary)
            final = Summary(value=[Summary.Value(tag="score/loss", simple_value=float(losses[-1]))])
            writer.file_writer.add_summary(final, len(losses))
    return job_dir
