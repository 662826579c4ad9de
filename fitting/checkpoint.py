"""checkpoint.pt: written whole (fitting.track.files), loaded without running code (zip CRCs,
weights_only), checked as this app writes it (keys, step, shapes) before it is put back."""

import io
import zipfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from fitting.config import CHECKPOINT, MAX_STEPS, ConfigError, short
from fitting.loop import State
from fitting.track.files import read_file, write_atomic

FORMAT = 4  # bump when the payload changes: old ones are refused
KEYS = {"format", "status", "step", "loop", "config", "model", "optimizer", "scheduler", "rng",
        "cuda_rng"}
MAX_NODES = 10_000  # a config's keys and values: a run's has about 200
STATUS = ("running", "interrupted", "completed", "converged", "diverged")


class Checkpoint:
    """The run's checkpoint.pt; `saved` is the step of the last one written or loaded."""

    def __init__(self, run_dir: Path) -> None:
        self.path, self.saved = run_dir / CHECKPOINT, None

    def save(self, cfg: DictConfig, task: Any, optimizer: Any, scheduler: Any,
             loop: dict[str, Any], status: str) -> None:
        """Write model, optimizer, schedule, RNG and loop state whole; `status` says why."""
        payload = {"format": FORMAT, "status": status, "step": loop["step"], "loop": loop,
                   "config": {**OmegaConf.to_container(cfg, resolve=True), "resume": None},
                   "model": task.model.state_dict(), "optimizer": optimizer.state_dict(),
                   "scheduler": None if scheduler is None else scheduler.state_dict(),
                   "rng": torch.get_rng_state(),
                   "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized()
                   else []}
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        write_atomic(self.path, buffer.getvalue())
        self.saved = loop["step"]


def load(path: Path) -> dict[str, Any]:
    """The payload of checkpoint.pt, checked: a damaged, crafted or foreign file is one line."""
    data = read_file(path)  # NotAFile: a link or a dir is not read, nor replaced
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            damaged = archive.testzip()  # torch.load does not check the CRCs
        payload = None if damaged else torch.load(io.BytesIO(data), map_location="cpu",
                                                  weights_only=True)
    except zipfile.BadZipFile:
        raise _bad(path, "is empty" if not data else
                   "is truncated or not a checkpoint (not a whole zip)") from None
    except Exception as err:  # noqa: BLE001  OSError, UnpicklingError, RuntimeError, ...
        raise _bad(path, f"is not a checkpoint weights_only can read ({short(err)})") from None
    if damaged:
        raise _bad(path, f"is damaged: its entry {damaged} fails its CRC check")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise _bad(path, f"was not written by this version of the app (format {FORMAT})")
    loop, step = payload.get("loop"), payload.get("step")
    fields = set(State.__dataclass_fields__)
    if set(payload) != KEYS or payload["status"] not in STATUS or not isinstance(loop, dict) \
            or not set(loop) <= fields or type(step) is not int or step < 0 \
            or loop.get("step") != step or not isinstance(payload["config"], dict) \
            or type(payload["config"].get("steps")) is not int \
            or step > min(payload["config"]["steps"], MAX_STEPS) \
            or not all(isinstance(v, int | float | None) for v in loop.values()) \
            or _nodes(payload["config"]) > MAX_NODES:
        raise _bad(path, "holds keys or values this app does not write (crafted or foreign)")
    weights = payload["model"].values() if isinstance(payload["model"], dict) else ()
    if not all(t.isfinite().all() for t in weights if torch.is_tensor(t) and t.is_floating_point()):
        raise _bad(path, "holds non-finite weights (NaN or inf), which the app never saves")
    return payload


def restore(payload: dict[str, Any], task: Any, optimizer: Any, scheduler: Any) -> State:
    """Put the payload's model, optimizer, schedule and RNGs back (batches replay by step)."""
    try:
        task.model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(payload["scheduler"])
        torch.set_rng_state(payload["rng"])
        if payload["cuda_rng"]:
            torch.cuda.set_rng_state_all(payload["cuda_rng"])
    except (KeyError, RuntimeError, ValueError, TypeError) as err:
        raise ConfigError(f"{CHECKPOINT} does not fit this task or optimizer ({short(err)}); "
                          "not resumed") from None
    return State(**payload["loop"])


def _nodes(node: Any) -> int:
    """The keys and values in `node`, a shared one counted at each place (a pickle's references
    can nest 2**60 of them in a few bytes, or loop): the walk stops past MAX_NODES."""
    count, stack = 0, [node]
    while stack and count <= MAX_NODES:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend((*item.keys(), *item.values()))
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return count


def _bad(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{path} {what}; not resumed")
