"""checkpoint.pt: all a run needs to continue bit-identically, written atomically, loaded safely.

It holds the model's and the optimizer's state_dict, the task's data order (cnn's minibatch
generator), the loop's own state (LoopState), the torch/numpy/python RNG states and the run's
config as a plain dict: tensors, dicts, lists and primitives only, so `torch.load(...,
weights_only=True)` reads it without running code from the file.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import random
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fitting.config import OpsConfig, typed_config
from fitting.train.checkpoint_errors import (
    check_config,
    check_model,
    check_payload,
    does_not_fit,
    unreadable,
)
from fitting.train.validate import CHECKPOINT, ConfigError, resume_problem

# The payload's layout: bump it when the payload changes (its keys, LoopState's fields, the
# config's keys), so that an older checkpoint is refused in one line, not with a KeyError.
FORMAT = 1
# Keys a resumed run may change: how long it runs, what it logs, how it saves, threads, what a
# non-finite loss does and whether it is profiled. Anything else (ops.* too) would make it a
# different run.
RESUMABLE_KEYS = ("steps", "log", "ckpt", "threads", "on_nonfinite", "profile", "resume")


@dataclass
class LoopState:
    """The training loop's own state after `step` steps: what the stop rule and the run's
    summary (FitResult) need besides the model and the optimizer."""

    step: int = 0
    step_ms: list[float] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    val_loss: float | None = None
    losses: list[float] = field(default_factory=list)  # the last two steps' losses
    quiet: int = 0  # StopRule's count of quiet steps
    previous: float | None = None  # StopRule's last loss
    wall_s: float = 0.0  # training time before this session


class Checkpointer:
    """Writes `run_dir/checkpoint.pt` of a run (task, optimizer, RNGs, `config`); the loop calls
    `save` every `every` steps (0: never), at the end and when it stops early."""

    def __init__(
        self, run_dir: Path, every: int, config: dict[str, Any], task: Any, optimizer: Any
    ) -> None:
        self.path = Path(run_dir) / CHECKPOINT
        self.every, self.config = every, config
        self.task, self.optimizer = task, optimizer

    def due(self, steps_done: int) -> bool:
        """Whether a periodic checkpoint is due after `steps_done` steps."""
        return self.every > 0 and steps_done % self.every == 0

    def save(self, state: LoopState, status: str) -> None:
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
            "loop": dict(vars(state), step_ms=torch.tensor(state.step_ms, dtype=torch.float64)),
            "rng": rng_states(),
        }
        save_atomic(payload, self.path)


def save_atomic(payload: dict[str, Any], path: Path) -> None:
    """torch.save into memory, written to `path` + '.tmp' in the same dir, then renamed over
    `path`: a kill or a failed write (OSError naming the file, e.g. a full disk) at any moment
    leaves the previous checkpoint or the new one, never a torn file.

    No fsync: it made a write ~10x slower here (~1 ms to 5-15 ms) and only guards against an
    OS crash, not against the killed or interrupted runs this is for."""
    # Tensors rather than long lists of numbers (step_ms, RNG states): pickling each number
    # made a write ~4x slower.
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
    try:
        with warnings.catch_warnings():  # e.g. torch on a foreign file's pickle protocol
            warnings.simplefilter("ignore")
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises EOFError, OSError, RuntimeError, UnpicklingError...
        raise unreadable(path, err) from err
    check_payload(raw, path, FORMAT)
    add_implied_keys(raw["config"])
    payload = Payload(raw)
    payload.path = path
    return payload


def add_implied_keys(config: dict[str, Any]) -> None:
    """Fill in, in place, the keys a checkpoint written before them implies: each op as its
    `impl` (ops.*), no profiling."""
    if "impl" in config:
        config.setdefault("ops", {f.name: config["impl"] for f in fields(OpsConfig)})
    config.setdefault("profile", False)


def restore(payload: dict[str, Any], task: Any, optimizer: Any) -> LoopState:
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
        loop = payload["loop"]
        return LoopState(**dict(loop, step_ms=loop["step_ms"].tolist()))
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


def differences(now: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """'key: X in the checkpoint, Y here' for each run-defining key whose values differ (of a
    task or optimizer of another name, only the name)."""
    a, b = _flatten(saved), _flatten(now)
    keys = sorted(k for k in a.keys() | b.keys() if k.split(".")[0] not in RESUMABLE_KEYS)
    differ = [k for k in keys if not _same(a.get(k, "<absent>"), b.get(k, "<absent>"))]
    renamed = {k.split(".")[0] for k in differ if k.endswith(".name") and k.count(".") == 1}
    return [
        f"{k}: {a.get(k, '<absent>')!r} in the checkpoint, {b.get(k, '<absent>')!r} here"
        for k in differ
        if k.split(".")[0] not in renamed or (k.count(".") == 1 and k.endswith(".name"))
    ]


def check_resumable(payload: dict[str, Any], cfg: DictConfig, run_dir: Path) -> None:
    """Refuse (ConfigError) a checkpoint of another run, of a finished or diverged one, or one
    already at or past `cfg.steps`."""
    diff = differences(plain_config(cfg), payload["config"])
    if diff:
        raise ConfigError(
            f"resume={run_dir}: the checkpoint is of a different run ({'; '.join(diff)}); "
            f"resume it with its own config (python train.py resume={run_dir}, plus steps= "
            "to extend it) or start a new run without resume="
        )
    status, step = payload["status"], payload["step"]
    if status in ("diverged", "converged"):
        what = "its loss became non-finite" if status == "diverged" else "it converged"
        raise ConfigError(
            f"resume={run_dir}: nothing to resume, the run stopped because {what} after "
            f"{step} steps; start a new run instead"
        )
    if step >= cfg.steps:
        raise ConfigError(
            f"resume={run_dir}: the run already did {step} steps; give steps= more than {step} "
            f"to continue it (got steps={cfg.steps})"
        )


def resume_config(cfg: DictConfig, overrides: list[str], choices: dict[str, Any]) -> DictConfig:
    """The config to resume with: the checkpoint's, typed as a composed one, with `resume` set
    and the command line's `overrides` of RESUMABLE_KEYS applied (from `cfg`, Hydra's
    composition of them). Any other override must agree with the checkpoint: ConfigError names
    those that do not.

    `choices` is Hydra's runtime.choices: `task=mlp` compares the task's name, not its
    defaults, with the checkpoint's."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    problem = resume_problem(cfg.resume)
    if problem:
        raise ConfigError(problem)
    run_dir = Path(cfg.resume).expanduser().resolve()
    payload = load(run_dir)
    saved = payload["config"]
    check_config(saved, payload.path)
    out, given = typed_config(saved), plain_config(cfg)
    differ = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key.split(".")[0] in RESUMABLE_KEYS:
            if key != "resume":
                OmegaConf.update(out, key, OmegaConf.select(cfg, key), merge=False)
            continue
        if key in choices and OmegaConf.select(cfg, f"{key}.name") is None:
            # A preset group (+experiment=): it may change keys this comparison does not see.
            differ.append(f"{override.input_line} (a preset)")
            continue
        # task=, optimizer=: the run's own, whatever its other settings.
        path = f"{key}.name" if key in choices else key
        now, was = _get(given, path), _get(saved, path)
        if not _same(now, was):
            differ.append(f"{key}={now!r} (the run has {was!r})")
    if differ:
        raise ConfigError(
            f"resume={run_dir} continues that run with its own config; these overrides change "
            f"it: {', '.join(differ)}. Only {', '.join(RESUMABLE_KEYS[:-1])} may be given"
        )
    out.resume = str(run_dir)
    return out


def _get(plain: dict[str, Any], key: str) -> Any:
    """The value at the dotted `key` of nested dicts, None where there is none."""
    node: Any = plain
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'a.b': value} of the leaves of nested dicts (lists stay values)."""
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal config values (nan equals nan: it is the same setting)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b
