"""checkpoint.pt: all a run needs to continue bit-identically, written atomically, loaded safely.

It holds the model's and the optimizer's state_dict, the task's data order (cnn's minibatch
generator), the run's state (fitting.train.loop.RunState), the torch/numpy/python RNG states
and the run's config as a plain dict: tensors, dicts, lists and primitives only, so `torch.load(...,
weights_only=True)` reads it without running code from the file.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fitting.train.checkpoint_errors import (
    check_belongs,
    check_integrity,
    check_model,
    check_payload,
    does_not_fit,
    unreadable,
)
from fitting.train.loop import RunState
from fitting.train.validate import CHECKPOINT

# The payload's layout: bump it when the payload changes (its keys, RunState's fields, the
# config's keys), so that an older checkpoint is refused in one line, not with a KeyError.
FORMAT = 2


class Checkpointer:
    """Writes `run_dir/checkpoint.pt` of a run (task, optimizer, RNGs, `config`); the loop calls
    `save` every `every` steps (0: never), at the end and when it stops early."""

    def __init__(
        self, run_dir: Path, every: int, config: dict[str, Any], task: Any, optimizer: Any
    ) -> None:
        self.path = Path(run_dir) / CHECKPOINT
        self.every, self.config = every, config
        self.saved_step: int | None = None  # the step of the last checkpoint written
        self.task, self.optimizer = task, optimizer

    def due(self, steps_done: int) -> bool:
        """Whether a periodic checkpoint is due after `steps_done` steps."""
        return self.every > 0 and steps_done % self.every == 0

    def save(self, state: RunState, status: str) -> None:
        """Write the checkpoint after `state.step` steps; `status` says why (running,
        interrupted, diverged, completed, converged)."""
        payload = {
            "format": FORMAT,
            "status": status,
            "step": state.step,
            "config": self.config,
            "model": self.task.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "task": task_state(self.task),
            "loop": {k: v for k, v in asdict(state).items() if k != "step_ms"},
            "rng": rng_states(),
        }
        save_atomic(payload, self.path)
        self.saved_step = state.step


def save_atomic(payload: dict[str, Any], path: Path) -> None:
    """torch.save into memory, written to `path` + '.tmp' in the same dir, then renamed over
    `path`: a kill or a failed write (OSError naming the file, e.g. a full disk) at any moment
    leaves the previous checkpoint or the new one, never a torn file.

    No fsync: it made a write ~10x slower here (~1 ms to 5-15 ms) and only guards against an
    OS crash, not against the killed or interrupted runs this is for."""
    # Tensors rather than long lists of numbers (the RNG states): pickling each number made a
    # write ~4x slower.
    tmp = path.with_name(path.name + ".tmp")
    # Serialized in memory first: torch.save to a file reports a full disk as a RuntimeError
    # without the OS error; a plain write raises OSError naming the file.
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    try:
        with open(tmp, "wb") as f:
            f.write(buffer.getbuffer())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):  # no torn file left behind, and its space back
            tmp.unlink(missing_ok=True)
        if err.filename is None:
            err.filename = str(tmp)
        raise


class Payload(dict):
    """A checkpoint's contents and `path`, the file they were read from (for its errors)."""

    path: Path


def load(run_dir: str | Path) -> Payload:
    """The checkpoint of `run_dir`, on the CPU, read with weights_only=True; CheckpointError
    (one line) when it is not a checkpoint of this version of the app. The file is only read."""
    path = Path(run_dir) / CHECKPOINT
    check_integrity(path)
    try:
        with warnings.catch_warnings():  # e.g. torch on a foreign file's pickle protocol
            warnings.simplefilter("ignore")
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises EOFError, OSError, RuntimeError, UnpicklingError...
        raise unreadable(path, err) from err
    check_payload(raw, path, FORMAT)
    check_belongs(raw["config"], path)
    payload = Payload(raw)
    payload.path = path
    return payload


def restore(payload: dict[str, Any], task: Any, optimizer: Any) -> RunState:
    """Put model, optimizer, data order and RNGs back as saved; return the loop's state.

    CheckpointError when the checkpoint does not fit the task's model or this version's state."""
    path = getattr(payload, "path", Path(CHECKPOINT))
    check_model(payload["model"], task.model.state_dict(), task.name, path)
    try:
        task.model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        generator = getattr(task, "generator", None)
        if generator is not None:
            generator.set_state(payload["task"]["generator"])
        set_rng_states(payload["rng"])
        return RunState(**payload["loop"])
    except (AttributeError, KeyError, TypeError, ValueError, RuntimeError) as err:
        raise does_not_fit(path, task.name, err) from err


def task_state(task: Any) -> dict[str, Any]:
    """The task's own state: the generator that draws cnn's minibatches (it continues from the
    data's generation, so the order is saved rather than recomputed from the seed)."""
    generator = getattr(task, "generator", None)
    return {} if generator is None else {"generator": generator.get_state()}


def rng_states() -> dict[str, Any]:
    """torch (CPU, and CUDA once initialized), numpy and python RNG states, as plain data."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "state": torch.tensor(internal), "gauss": gauss},
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                  "has_gauss": has_gauss, "cached": cached},
    }
    if torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Set the RNG states rng_states() returned."""
    torch.set_rng_state(states["torch"])
    py = states["python"]
    random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))
    n = states["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached"]))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def plain_config(cfg: DictConfig) -> dict[str, Any]:
    """The run's config as plain data (enums as strings), `resume` left out (null)."""
    config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    config["resume"] = None
    return config
