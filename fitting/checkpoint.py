"""checkpoint.pt and the run dir: an atomic save, a load that runs no code (weights_only, zip
CRCs checked), the one config check, the run-dir lock, and the config a resumed run continues
with. Nothing read from a run dir is executed: its config is data, compared, never instantiated."""

from __future__ import annotations

import fcntl
import io
import os
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from fitting.config import CHECKPOINT, REPO_ROOT, ConfigError

LOCK = "run.lock"
FORMAT = 3  # bump when the payload changes: an older checkpoint is refused in one line
KEPT = ("steps", "log", "ckpt", "threads", "on_nonfinite", "profile")  # a resume may change


class Checkpoint:
    """The run's checkpoint.pt: `save` writes model, optimizer, RNG and loop state whole;
    `saved` is the step of the last one written (None: none yet)."""

    def __init__(self, run_dir: Path, cfg: DictConfig, task: Any, optimizer: Any,
                 saved: int | None = None) -> None:
        self.path, self.config = run_dir / CHECKPOINT, plain(cfg)
        self.task, self.optimizer, self.saved = task, optimizer, saved

    def save(self, loop: dict[str, Any], status: str) -> None:
        """Write the checkpoint after loop['step'] steps; `status` says why."""
        payload = {"format": FORMAT, "status": status, "step": loop["step"],
                   "config": self.config, "model": self.task.model.state_dict(),
                   "optimizer": self.optimizer.state_dict(), "loop": loop,
                   "rng": torch.get_rng_state(),
                   "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized()
                   else []}
        buffer = io.BytesIO()  # serialized first: a full disk is then an OSError naming the file
        torch.save(payload, buffer)
        tmp = self.path.with_name(CHECKPOINT + ".tmp")
        try:
            tmp.write_bytes(buffer.getbuffer())
            os.replace(tmp, self.path)  # a kill at any moment leaves the old file or the new
        except OSError:
            with suppress(OSError):
                tmp.unlink()
            raise
        self.saved = loop["step"]

    def last(self) -> str:
        """Where the run can be resumed from, as the last phrase of a stopped run's line."""
        if self.saved is None or not self.path.is_file():
            return "no checkpoint is left to resume from: start the run again"
        return (f"the last good checkpoint is {self.path} (after step {self.saved}); resume "
                f"with: python train.py {resume_arg(self.path.parent)}")


def resume_arg(run_dir: Path) -> str:
    """resume=DIR, quoted for the shell and Hydra where DIR is not plain (a sweep job's dir)."""
    if re.fullmatch(r"[\w/.+-]+", str(run_dir)):
        return f"resume={run_dir}"
    return '"resume=' + repr(str(run_dir)).replace('"', '\\"') + '"'


def load(run_dir: Path) -> dict[str, Any]:
    """The checkpoint of `run_dir`, its zip CRCs checked, read with weights_only=True (no code
    runs); ConfigError in one line when it cannot be resumed from."""
    path = run_dir / CHECKPOINT
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
        payload = None if damaged else torch.load(path, map_location="cpu", weights_only=True)
    except zipfile.BadZipFile:
        size = path.stat().st_size
        raise _bad(path, "is empty" if size == 0 else
                   f"is truncated or not a checkpoint ({size} bytes, not a whole zip)") from None
    except OSError as err:
        raise _bad(path, f"cannot be read ({err.strerror})") from None
    except Exception as err:  # noqa: BLE001  torch raises UnpicklingError, RuntimeError, ...
        raise _bad(path, f"is not a checkpoint weights_only can read ({short(err)})") from None
    if damaged:
        raise _bad(path, f"is damaged: its entry {damaged} fails its CRC check")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise _bad(path, f"was not written by this version of the app (format {found!r}, this "
                         f"one reads {FORMAT})")
    return payload


def existing(run_dir: Path, cfg: DictConfig) -> dict[str, Any] | None:
    """The checkpoint this run continues: resume=, or one of the same config (a restarted or
    requeued job); None for a fresh start. ConfigError for another run's or a finished one."""
    if not (run_dir / CHECKPOINT).is_file():
        return None
    payload = load(run_dir)
    if cfg.resume is None:
        diff = difference(payload["config"], plain(cfg), ())
        if diff:
            raise ConfigError(f"{run_dir} holds another run ({diff}); continue that one with: "
                              f"python train.py {resume_arg(run_dir)}, or run this one in a "
                              "fresh dir")
    else:
        diff = difference(payload["config"], plain(cfg), KEPT)
        if diff:
            raise ConfigError(f"{run_dir / CHECKPOINT} is not the run dir's run ({diff}); "
                              "not resumed")
    status, step = payload["status"], payload["step"]
    if status in ("diverged", "converged") or step >= cfg.steps:
        how = "diverged" if status == "diverged" else "converged" if status == "converged" \
            else f"did {step} of {cfg.steps} steps; a larger steps= extends it"
        raise ConfigError(f"{run_dir} holds a finished run (it {how}): nothing to resume; "
                          "start a new run in a fresh dir")
    return payload


def restore(payload: dict[str, Any], task: Any, optimizer: Any) -> dict[str, Any]:
    """Put model, optimizer and RNGs back as saved (a task replays its batches by step);
    return the loop's state."""
    try:
        task.model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
    except (KeyError, RuntimeError, ValueError) as err:
        raise ConfigError(f"checkpoint.pt does not fit this task or optimizer ({short(err)})") \
            from None
    torch.set_rng_state(payload["rng"])
    if payload["cuda_rng"]:
        torch.cuda.set_rng_state_all(payload["cuda_rng"])
    return payload["loop"]


def plain(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain resolved data, as a checkpoint stores it (`resume` left out)."""
    out = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return {**out, "resume": None}


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
    """{'a.b': leaf} of nested dicts."""
    if not isinstance(node, dict) or not node:
        return {prefix[:-1]: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def short(value: Any, limit: int = 80) -> str:
    """A value or an error as at most `limit` characters of one line."""
    text = " ".join((str(value) if isinstance(value, BaseException) else repr(value)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bad(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{path} {what}; not resumed (start afresh in a new dir)")


@contextmanager
def lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s run.lock while the block runs (the OS drops it if the process dies), then
    remove it; ConfigError naming the holder's pid if another run holds it."""
    path = run_dir / LOCK
    with open(path, "a+") as f:
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
            path.unlink(missing_ok=True)  # still ours: unlinked before the close drops it


def resume_config(resume: str, run_dir: Path, given: list[str]) -> DictConfig:
    """The config resume=`resume` continues with: conf/ composed with the run dir's
    .hydra/overrides.yaml (data only; no `_target_` outside ops.*) and the command line's
    `given` overrides of the KEPT keys; ConfigError if it is not the run dir's own config."""
    where = Path(resume).expanduser().resolve()
    what = ("is a file; give the run dir that holds it" if where.is_file() else
            f"holds no {CHECKPOINT}" if where.is_dir() else "does not exist")
    if not (where / CHECKPOINT).is_file():
        raise ConfigError(f"resume={resume}: {where} {what}")
    if where != run_dir:
        raise ConfigError(f"resume={resume} runs in that dir; leave hydra.run.dir out")
    others = [o for o in given if _key(o) != "resume" and _key(o).split(".")[0] not in KEPT]
    if others:
        raise ConfigError(f"resume= continues the run's own config; only steps, log.*, "
                          f"ckpt.*, threads, on_nonfinite and profile may change, got {others[0]}")
    stored = _read(where / ".hydra" / "overrides.yaml", list)
    _refuse_code(stored)
    cfg = _compose([*stored, *(o for o in given if _key(o) != "resume"), f"resume={where}"])
    own = _read(where / ".hydra" / "config.yaml", dict)
    diff = difference(own, OmegaConf.to_container(cfg, enum_to_str=True), KEPT,
                      ("in .hydra/config.yaml", "as its overrides compose now"))
    if diff:
        raise ConfigError(f"resume={resume}: .hydra/config.yaml is not what its overrides.yaml "
                          f"composes ({diff}: edited, truncated, or conf/ changed); not resumed")
    return cfg


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _read(path: Path, kind: type) -> Any:
    """A YAML file of the run dir as plain data (yaml.safe_load: no tags, no objects)."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing; the run dir's config is needed to resume it") \
            from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        why = getattr(err, "strerror", None) or f"not whole YAML: {short(err, 50)}"
        raise ConfigError(f"{path} cannot be read ({why}); not resumed") from None
    if not isinstance(data, kind) or not data and kind is dict:
        what = ("is empty" if data is None else
                f"holds a {type(data).__name__}, not a {kind.__name__}")
        raise ConfigError(f"{path} {what} (truncated?); not resumed")
    return data


def _refuse_code(overrides: list) -> None:
    """ConfigError for an override that could make a resume run code the conf/ files do not
    name: a hydra.* key, an instantiation key (_target_, ...) outside ops.*, a group path."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([str(o) for o in overrides])
    except Exception as err:  # noqa: BLE001  any parse error: not a run's overrides
        raise ConfigError(f".hydra/overrides.yaml does not parse ({short(err)})") from None
    for o in parsed:
        key, value = o.key_or_group, o.value()
        if key.split(".")[0] == "ops":
            continue
        if (key.split(".")[0].split("/")[0] == "hydra" or any(map(_special, key.split(".")))
                or _instantiates(value) or "/" in str(value) and "." not in key):
            raise ConfigError(f"the run dir's .hydra/overrides.yaml sets {short(o.input_line)}, "
                              "which resume does not take from a run dir; not resumed")


def _instantiates(value: Any) -> bool:
    """Whether `value` holds a dict with a Hydra key such as _target_."""
    if isinstance(value, dict):
        return any(_special(k) or _instantiates(v) for k, v in value.items())
    return isinstance(value, list) and any(_instantiates(v) for v in value)


def _special(key: Any) -> bool:
    return str(key).startswith("_") and str(key).endswith("_")


def _compose(overrides: list[str]) -> DictConfig:
    """conf/ composed with `overrides`, as train.py composes it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        if GlobalHydra.instance().is_initialized():
            return compose("config", overrides=overrides)
        with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
            return compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"the run's overrides no longer compose ({short(err)})") from None
