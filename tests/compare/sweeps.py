"""Run dirs as train.py writes them, without training: .hydra/config.yaml, one event file from
SummaryWriter (scalars and the HParams session, as fitting.track writes them), results.json."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import yaml
from tensorboard.plugins.hparams.summary_v2 import hparams_pb
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from fitting.slots import SLOTS, describe
from fitting.tasks import TASKS
from fitting.track.tensorboard import hparam_values, trial_id

LOSSES = 1000.0 * 0.8 ** np.arange(10) + 9.0


def write_run(run_dir: str | bytes | os.PathLike, *, status: str | None = "completed",
              losses: np.ndarray = LOSSES, step_ms: float = 2.0, saved_bytes: float = 48_000,
              peak_bytes: float | None = None, lr: float = 1e-3, seed: int = 0,
              impl: str = "custom", task: str = "mlp", optimizer: str = "adam", sources: dict[str, str] | None = None,
              **ops: object) -> str:
    """One run dir of `task`; `ops` are the op choices (the other slots follow `impl`, as Hydra
    saves them: '${impl}'); status=None: no results.json (a run still running, or killed);
    `sources`: slot -> the text of a user op's file, whose hash results.json's op text ends with."""
    run_dir = os.fsdecode(run_dir)
    config = {"task": {"_target_": f"fitting.tasks.{TASKS[task].__name__}", "hidden": [8, 8]},
              "optimizer": {"_target_": "torch.optim.Adam", "_partial_": True, "lr": lr},
              "impl": impl, "ops": {slot: ops.get(slot, "${impl}") for slot in SLOTS},
              "seed": seed, "steps": 10}
    overrides = [f"ops.{slot}={describe(c)}" for slot, c in ops.items()] + [
        f"optimizer.lr={lr}", f"seed={seed}"]
    ops = {slot: describe(ops.get(slot, impl)) for slot in TASKS[task].slots}
    op_sources = {}
    for slot, text in (sources or {}).items():
        digest = hashlib.sha256(text.encode()).hexdigest()
        ops[slot] += f" @{digest[:8]}"
        op_sources[slot] = {"file": f"/home/me/{ops[slot].split(':')[0]}.py", "sha256": digest}
    os.makedirs(os.path.join(run_dir, ".hydra"))
    with open(os.path.join(run_dir, ".hydra", "config.yaml"), "w") as f:
        yaml.safe_dump(config, f)
    with open(os.path.join(run_dir, ".hydra", "overrides.yaml"), "w") as f:
        yaml.safe_dump(overrides, f)
    # SummaryWriter opens only UTF-8 paths: write elsewhere and move the file in.
    tmp = os.path.join(os.path.dirname(run_dir) or ".", ".events")
    with SummaryWriter(tmp) as writer:
        # The session alone, as fitting.track writes it: the experiment is the sweep's end's.
        values = hparam_values({"task": task, "optimizer": optimizer, "ops": ops}, config,
                               overrides)
        _, _, end = hparams(values, {})
        trial = trial_id(Path(run_dir.encode("utf-8", "replace").decode()))  # TensorBoard's
        for summary in (hparams_pb(values, trial_id=trial), end):
            writer.file_writer.add_summary(summary)
        for step, loss in enumerate(losses):
            writer.add_scalar("loss/train", loss, step)
            writer.add_scalar("time/step_ms_median", step_ms, step)
            writer.add_scalar("memory/saved_bytes", saved_bytes, step)
            if peak_bytes is not None:
                writer.add_scalar("memory/peak_bytes", peak_bytes, step)
    for name in os.listdir(tmp):
        os.replace(os.path.join(tmp, name), os.path.join(run_dir, name))
    os.rmdir(tmp)
    if status is not None:
        with open(os.path.join(run_dir, "results.json"), "w") as f:
            json.dump({"status": status, "final_loss": float(losses[-1]) if len(losses) else None,
                       "step_ms_median": step_ms, "saved_bytes": saved_bytes,
                       "peak_rss_bytes": 1e8, "task": task, "optimizer": optimizer,
                       "ops": ops, **({"op_sources": op_sources} if op_sources else {})}, f)
    return run_dir


def files(root: str | os.PathLike) -> dict[str, tuple[int, int]]:
    """Every file under `root`: (size, mtime in ns) by path."""
    found = {}
    for path, _, names in os.walk(os.fsdecode(root)):
        for name in names:
            stat = os.stat(os.path.join(path, name))
            found[os.path.join(path, name)] = (stat.st_size, stat.st_mtime_ns)
    return found
