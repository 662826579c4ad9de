"""A checkpoint.pt that cannot be resumed from (empty, truncated, not this app's, of another
format, or not fitting its task's model) as one CheckpointError line: which file, what is wrong
with it and the command that starts the run afresh. The file itself is only ever read."""

from __future__ import annotations

import pickle
import shlex
import zipfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fitting.train.validate import ConfigError

# What Checkpointer.save writes; a file without one of these is not a checkpoint of this app.
KEYS = ("format", "status", "step", "config", "model", "optimizer", "task", "loop", "rng")
ZIP_START, ZIP_END = b"PK\x03\x04", b"PK\x05\x06"  # a zip's first header, its end record


class CheckpointError(ConfigError):
    """A checkpoint.pt this run cannot resume from; train.py prints it as one line, exit 2."""


def unreadable(path: Path, err: BaseException) -> CheckpointError:
    """The error for a `path` that torch.load failed on with `err`: empty, truncated or not a
    file torch.save wrote."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(len(ZIP_START))
            f.seek(max(0, size - 2**16 - 22))  # the end record is within the last 64 KiB + 22
            complete = ZIP_END in f.read()
    except OSError as stat_err:
        return _error(path, f"cannot be read ({stat_err.strerror})", err)
    if size == 0:
        return _error(path, "is empty (0 bytes)", err)
    if head == ZIP_START and not complete:
        return _error(path, f"is truncated ({size} bytes, its end is missing)", err)
    if isinstance(err, pickle.UnpicklingError) and "allowed global" in str(err):
        why = "loading it would build Python objects, which a checkpoint never holds; not loaded"
    else:
        why = "not a file torch.save wrote"
    return _error(path, f"is not a checkpoint of this app ({why})", err)


def check_integrity(path: Path) -> None:
    """Raise CheckpointError if a zip entry of `path` fails its CRC (bit rot, a torn copy):
    torch.load does not check them, and would train on the damaged numbers."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        return  # not a zip, or unreadable: torch.load's error says what it is
    if damaged is not None:
        _raise(path, f"is damaged: its entry {damaged} fails its CRC check (the file changed "
                     "after it was written); not resumed")


def check_belongs(config: dict[str, Any], path: Path) -> None:
    """Raise CheckpointError if the checkpoint's task or model differs from the run dir's own
    config (.hydra/config.yaml): a checkpoint copied in from another run."""
    own_path = path.parent / ".hydra" / "config.yaml"
    if not own_path.is_file():
        return
    own = OmegaConf.to_container(OmegaConf.load(own_path), resolve=False)
    theirs, mine = config.get("task", {}), own.get("task", {})
    if not isinstance(mine, dict) or theirs == mine:
        return
    keys = sorted((k for k in theirs.keys() | mine.keys() if theirs.get(k) != mine.get(k)),
                  key=lambda k: (k != "name", k))
    shown = ", ".join(f"task.{k}: {theirs.get(k)!r} in the checkpoint, {mine.get(k)!r} in the "
                      "run dir's config" for k in keys[:3])
    _raise(path, f"belongs to another run ({shown}); not resumed")


def check_payload(payload: Any, path: Path, fmt: int) -> None:
    """Raise CheckpointError unless `payload` has every key of a checkpoint of format `fmt`."""
    if not isinstance(payload, dict) or "format" not in payload:
        kind = type(payload).__name__
        _raise(path, f"is not a checkpoint of this app (torch.load reads it as {kind}, "
                     "without a 'format' key)")
    if payload["format"] != fmt:
        _raise(path, f"was written by an incompatible version of this app (checkpoint format "
                     f"{payload['format']!r}, this version reads format {fmt}): resume it with "
                     "the version that wrote it")
    missing = [key for key in KEYS if key not in payload]
    if missing or not isinstance(payload["config"], dict):
        _raise(path, f"is not a checkpoint of this app (no {', '.join(missing or ['config'])})")


def check_config(saved: dict[str, Any], path: Path) -> None:
    """Raise CheckpointError unless the checkpoint's config `saved` names a task and an
    optimizer of this version and has exactly the keys their schemas have."""
    from omegaconf.errors import OmegaConfBaseException

    from fitting.config import typed_config
    from fitting.optim import OPTIMIZERS
    from fitting.tasks import TASKS

    for group, known in (("task", TASKS), ("optimizer", OPTIMIZERS)):
        node = saved.get(group)
        name = node.get("name") if isinstance(node, dict) else None
        if name not in known:
            _raise(path, f"was written by another version of this app: its {group} "
                         f"{name!r} is not one of this version's ({', '.join(sorted(known))})")
    try:
        own = set(_keys(OmegaConf.to_container(typed_config(saved), enum_to_str=True)))
    except OmegaConfBaseException as err:
        _raise(path, "was written by an incompatible version of this app: its config does "
                     f"not fit this version's ({str(err).splitlines()[0]})")
    missing = sorted(own - set(_keys(saved)))
    if missing:
        _raise(path, "was written by an incompatible version of this app: its config "
                     f"lacks {_some(missing)}")


def check_model(saved: dict[str, Any], own: dict[str, Any], task: str, path: Path) -> None:
    """Raise CheckpointError unless the state_dict `saved` has the names and shapes of the
    model's own (`own`) of task `task`."""
    if saved.keys() == own.keys() and all(
        getattr(saved[k], "shape", None) == getattr(own[k], "shape", None) for k in own
    ):
        return
    _raise(path, f"does not fit task={task} of this version of the app: its model has "
                 f"{_some(list(saved)) or 'no parameters'}, the task's has {_some(list(own))} "
                 "(written by another task or an incompatible version)")


def does_not_fit(path: Path, task: str, err: BaseException) -> CheckpointError:
    """The error for a checkpoint whose optimizer, data order, loop or RNG state does not load
    into this version's task `task` (`err`: what failed)."""
    what = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return _error(path, f"does not fit task={task} of this version of the app ({what[:120]}); "
                        "it was written by an incompatible version", err)


def start_afresh(run_dir: Path) -> str:
    """The command that starts the run of `run_dir` again in a new dir: its own overrides, as
    Hydra saved them in `.hydra/overrides.yaml`."""
    try:
        from omegaconf import OmegaConf

        overrides = [str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")]
    except Exception:  # no such file or not a list: the user knows the run's overrides
        return "python train.py plus the run's overrides (without resume=)"
    return " ".join(["python", "train.py", *(shlex.quote(o) for o in overrides)])


def _keys(node: Any, prefix: str = "") -> list[str]:
    """The dotted keys of the leaves of nested dicts (lists are leaves)."""
    if not isinstance(node, dict) or not node:
        return [prefix]
    return [
        k for key, value in node.items() for k in _keys(value, f"{prefix}.{key}" if prefix else key)
    ]


def _some(names: list[str], shown: int = 4) -> str:
    """'a, b, c' of the first `shown` names, and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _error(path: Path, what: str, cause: BaseException | None = None) -> CheckpointError:
    """'resume=DIR: DIR/checkpoint.pt <what>; start afresh with: <command>'."""
    run_dir = path.parent
    error = CheckpointError(
        f"resume={run_dir}: {path} {what}; start afresh (a new run dir) with: "
        f"{start_afresh(run_dir)}"
    )
    error.__cause__ = cause
    return error


def _raise(path: Path, what: str) -> None:
    """Raise _error(path, what)."""
    raise _error(path, what)
