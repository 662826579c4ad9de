"""checkpoint.pt and the run dir: atomic save, a load that runs no code (zip CRCs, weights_only),
one config check, the lock, resume's config. A run dir's config is data: compared, never run."""

from __future__ import annotations

import fcntl
import io
import os
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fitting.config import CHECKPOINT, REPO_ROOT, ConfigError

LOCK, FORMAT = "run.lock", 4  # bump FORMAT when the payload changes: old ones are refused
KEPT = ("steps", "log", "ckpt", "threads", "on_nonfinite", "profile")  # a resume may change


class Checkpoint:
    """The run's checkpoint.pt; `saved` is the step of the last one written (None: none yet)."""

    def __init__(self, run_dir: Path, cfg: DictConfig, task: Any, optimizer: Any,
                 saved: int | None = None, scheduler: Any = None) -> None:
        self.path, self.config = run_dir / CHECKPOINT, plain(cfg)
        self.task, self.optimizer, self.saved, self.scheduler = task, optimizer, saved, scheduler

    def save(self, loop: dict[str, Any], status: str) -> None:
        """Write model, optimizer, RNG and loop state whole; `status` says why."""
        payload = {"format": FORMAT, "status": status, "step": loop["step"], "loop": loop,
                   "config": self.config, "model": self.task.model.state_dict(),
                   "optimizer": self.optimizer.state_dict(), "rng": torch.get_rng_state(),
                   "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                   "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized()
                   else []}
        buffer = io.BytesIO()  # serialized first: a full disk is then an OSError naming the file
        torch.save(payload, buffer)
        write_atomic(self.path, buffer.getvalue())
        self.saved = loop["step"]

    def last(self) -> str:
        """Where the run can be resumed from: the last phrase of a stopped run's line."""
        if self.saved is None or not self.path.is_file():
            return "no checkpoint is left to resume from: start the run again"
        return (f"the last good checkpoint is {self.path} (after step {self.saved}); resume "
                f"with: {resume_command(self.path.parent)}")


def write_atomic(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all (a kill or a full disk leaves the old file)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # no torn file left, and its space back
        raise


def resume_command(run_dir: Path) -> str:
    """python train.py resume=DIR, quoted for Hydra and the shell where DIR is a sweep job's."""
    if re.fullmatch(r"[\w/.+-]+", str(run_dir)):
        return f"python train.py resume={run_dir}"
    return 'python train.py "resume=' + repr(str(run_dir)).replace('"', '\\"') + '"'


def restored(run_dir: Path, cfg: DictConfig, task: Any, optimizer: Any,
             scheduler: Any = None) -> dict[str, Any] | None:
    """The loop state of the checkpoint this run continues (resume=, or a requeued job: the same
    config), model, optimizer and RNGs put back (batches replay by step); None: a fresh start."""
    path = run_dir / CHECKPOINT
    if not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()  # torch.load does not check the CRCs
        payload = None if damaged else torch.load(path, map_location="cpu", weights_only=True)
    except zipfile.BadZipFile:
        raise _bad(path, "is empty" if path.stat().st_size == 0 else
                   "is truncated or not a checkpoint (not a whole zip)") from None
    except Exception as err:  # noqa: BLE001  OSError, UnpicklingError, RuntimeError, ...
        raise _bad(path, f"is not a checkpoint weights_only can read ({short(err)})") from None
    if damaged:
        raise _bad(path, f"is damaged: its entry {damaged} fails its CRC check")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise _bad(path, f"was not written by this version of the app (format {FORMAT})")
    diff = difference(payload["config"], plain(cfg), KEPT if cfg.resume else ())
    if diff:
        raise _bad(path, f"is not the run dir's run ({diff})") if cfg.resume else ConfigError(
            f"{run_dir} holds another run ({diff}); continue that one with: "
            f"{resume_command(run_dir)}, or run this one in a fresh dir")
    status, step = payload["status"], payload["step"]
    if status in ("diverged", "converged") or step >= cfg.steps:
        how = status if status in ("diverged", "converged") else \
            f"did {step} of {cfg.steps} steps; a larger steps= extends it"
        raise ConfigError(f"{run_dir} holds a finished run (it {how}): nothing to resume")
    try:
        task.model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(payload["scheduler"])
    except (KeyError, RuntimeError, ValueError) as err:
        raise ConfigError(f"checkpoint.pt does not fit this task or optimizer ({short(err)})") \
            from None
    torch.set_rng_state(payload["rng"])
    if payload["cuda_rng"]:
        torch.cuda.set_rng_state_all(payload["cuda_rng"])
    return payload["loop"]


def plain(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain resolved data, as a checkpoint stores it (`resume` left out)."""
    return {**OmegaConf.to_container(cfg, resolve=True), "resume": None}


def difference(theirs: dict, ours: dict, skip: tuple[str, ...],
               where: tuple[str, str] = ("there", "here")) -> str | None:
    """'key: X there, Y here' of the first key (outside `skip` and resume) whose value differs."""
    a, b = _flat(theirs), _flat(ours)
    for key in sorted(a.keys() | b.keys()):
        if key.split(".")[0] not in (*skip, "resume") and a.get(key, ...) != b.get(key, ...):
            return (f"{key}: {short(a.get(key, '<none>'))} {where[0]}, "
                    f"{short(b.get(key, '<none>'))} {where[1]}")
    return None


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        return {prefix[:-1]: node}
    return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}


def short(value: Any, limit: int = 80) -> str:
    """A value or an error as at most `limit` characters of one line."""
    text = " ".join((str(value) if isinstance(value, BaseException) else repr(value)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bad(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{path} {what}; not resumed")


@contextmanager
def lock(run_dir: Path) -> Iterator[None]:
    """Hold run_dir/run.lock while the block runs, then remove it; refuse if another holds it."""
    with open(run_dir / LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise ConfigError(f"{run_dir} is in use by another run (pid {f.read(20).strip()}): "
                              "wait for it to end, or run in another dir") from None
        f.truncate(0)
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            (run_dir / LOCK).unlink(missing_ok=True)  # while still ours


def resume_config(resume: str, run_dir: Path, given: list[str]) -> DictConfig:
    """conf/ composed with the run dir's overrides.yaml (data; no _target_ outside ops.*) and
    the `given` KEPT keys; ConfigError unless that is the run dir's .hydra/config.yaml."""
    where = Path(resume).expanduser().resolve()
    if not (where / CHECKPOINT).is_file():
        raise ConfigError(f"resume={resume}: {where} " + (
            "is a file; give the run dir that holds it" if where.is_file() else
            f"holds no {CHECKPOINT}" if where.is_dir() else "does not exist"))
    if where != run_dir:
        raise ConfigError(f"resume={resume} runs in that dir; leave hydra.run.dir out")
    new = [o for o in given if not o.startswith("resume=")]
    for o in (o for o in new if o.split("=")[0].split(".")[0] not in KEPT):
        raise ConfigError("resume= continues the run's own config; only steps, log.*, ckpt.*, "
                          f"threads, on_nonfinite and profile may change, got {o[:60]}")
    stored = _read(where / ".hydra" / "overrides.yaml", list)
    for o in map(str, stored):
        key, _, value = o.lstrip("+~").partition("=")
        if key.split(".")[0] != "ops" and (key.startswith("hydra") or "/" in value and "." not in
                                           key or re.search(r"(^|\W)_\w+_(\W|$)", o)):
            raise ConfigError(f"{where}/.hydra/overrides.yaml sets {short(o, 60)}, which resume "
                              "does not take from a run dir (it could run code); not resumed")
    try:
        if GlobalHydra.instance().is_initialized():  # inside train.py's Hydra app
            cfg = compose("config", overrides=[*stored, *new, f"resume={where}"])
        else:
            with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
                cfg = compose("config", overrides=[*stored, *new, f"resume={where}"])
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"resume={resume}: its overrides no longer compose ({short(err)})") \
            from None
    diff = difference(_read(where / ".hydra" / "config.yaml", dict),
                      OmegaConf.to_container(cfg), KEPT,
                      ("in .hydra/config.yaml", "as its overrides compose now"))
    if diff:
        raise ConfigError(f"resume={resume}: .hydra/config.yaml is not what its overrides.yaml "
                          f"composes ({diff}: edited, truncated, or conf/ changed); not resumed")
    return cfg


def _read(path: Path, kind: type) -> Any:
    """A YAML file of the run dir as plain data (yaml.safe_load: no tags, no objects)."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise _bad(path, "is missing (the run dir's config is needed)") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        why = getattr(err, "strerror", None) or f"not whole YAML: {short(err, 50)}"
        raise _bad(path, f"cannot be read ({why})") from None
    if not isinstance(data, kind) or kind is dict and not data:
        raise _bad(path, "is empty" if not data else
                   f"holds a {type(data).__name__}, not a {kind.__name__} (truncated?)")
    return data
