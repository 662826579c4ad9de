"""The run dir's life, in one place: whether this invocation made it (a Hydra callback, before
Hydra's mkdir), the claim (run.lock), the one decision from its data (a new run, this run
continued, or another run refused), a new run's .hydra/, and the cleanup (only an empty dir
this invocation made). Resuming a dir's config: fitting.resume."""

import fcntl
import os
import sys
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fitting.checkpoint import load
from fitting.config import CHECKPOINT, ConfigError, short
from fitting.resume import KEPT, _read, resume_command
from fitting.track.files import write_atomic

LOCK, MADE = "run.lock", "FITTING_MADE_DIR"  # MADE: the dir this invocation made (inherited)
FIRST = ("task", "optimizer", "ops", "impl")  # the differences a refusal names first
WRITE_FAULT = 74  # EX_IOERR: a write failed (full disk, read-only dir)


class MadeHere(Callback):
    """Makes the run (or sweep) dir before Hydra does, noting in the environment whether this
    invocation made it (its jobs inherit that); a dir that cannot be made is one line."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Before Hydra's mkdir of hydra.run.dir."""
        _make(str(config.hydra.run.dir))

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        """Before the launcher's mkdir of hydra.sweep.dir (the jobs' dirs are inside it)."""
        _make(str(config.hydra.sweep.dir))


def _make(path: str) -> None:
    path = Path(os.path.abspath(path))
    missing = [d for d in (path, *path.parents) if not d.exists()]
    os.environ.pop(MADE, None)
    if missing:
        try:
            missing[0].mkdir(parents=True, exist_ok=True)
        except OSError as err:
            print(fault(err), file=sys.stderr, flush=True)
            sys.exit(WRITE_FAULT)
        os.environ[MADE] = str(missing[-1])  # the top dir made: a refused run removes up to it


def fault(err: OSError, where: Path | None = None) -> str:
    """'could not write PATH: REASON' of a write that failed (`where` if it names no file)."""
    return f"could not write {os.fsdecode(err.filename or where or '?')}: {err.strerror or err}"


class RunDir(AbstractContextManager):
    """One run's dir: claim() locks it and decides; leaving the `with` block releases the lock
    and removes the dir only if this invocation made it and it is empty."""

    def __init__(self, out: Path) -> None:
        made = os.environ.get(MADE)
        self.out, self.lock, self.new, self.owned = out, None, False, False
        missing = [d for d in (out, *out.parents) if not d.exists()]  # outside Hydra's app
        self.top = missing[-1] if missing else Path(made) if made and Path(made) in (
            out, *out.parents) else None

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:  # a refusal leaves a killed run's run.lock as it was
            if self.owned or not os.fstat(self.lock.fileno()).st_size:
                with suppress(OSError):
                    (self.out / LOCK).unlink()  # while still ours
            self.lock.close()
        for made in [self.out, *self.out.parents] if self.top else []:
            try:
                os.rmdir(made)  # only an empty dir: never a file of this run or another's
            except OSError:
                break
            if made == self.top:
                break

    def claim(self, cfg: DictConfig, overrides: list[str], hydra: Any) -> dict | None:
        """Lock the dir, then decide once from its data: a new run (its .hydra/ written; None),
        this run continued (its checkpoint's payload, or None: from step 0), or ConfigError."""
        self._lock()
        config = self.out / ".hydra" / "config.yaml"
        stored = _read(config, dict) if cfg.resume or config.exists() else None
        payload = load(self.out / CHECKPOINT) if (self.out / CHECKPOINT).is_file() else None
        if stored is None and payload is None:
            self._own()
            self.new = True
            self._new(cfg, overrides, hydra)
            return None
        for path, theirs in ((config, stored), (self.out / CHECKPOINT, payload)):
            diff = None if theirs is None else difference(
                theirs if path == config else theirs["config"], cfg, path,
                KEPT if cfg.resume else ())
            if diff and diff.startswith("scheduler.") and cfg.resume:  # T_max: ${steps}
                raise ConfigError(f"resume={cfg.resume}: its lr schedule spans the run's own steps "
                                  f"({diff}): continue it with its steps, or extend a run that has "
                                  "scheduler=none")
            if diff and cfg.resume:
                raise ConfigError(f"resume={cfg.resume}: {path} is not the run its overrides.yaml "
                                  f"composes ({diff}: edited, or conf/ changed); not resumed")
            if diff:
                raise ConfigError(f"{self.out} holds another run ({diff}); continue that one "
                                  f"with: {resume_command(self.out)}, or run it in a fresh dir")
        if payload and (payload["status"] in ("diverged", "converged")
                        or payload["step"] >= cfg.steps):
            how = payload["status"] if payload["status"] in ("diverged", "converged") else \
                f"did {payload['step']} of {cfg.steps} steps; a larger steps= extends it"
            raise ConfigError(f"{self.out} holds a finished run (it {how}): nothing to resume")
        self._own()
        return payload

    def _own(self) -> None:
        """The dir is this run's: its pid in run.lock, removed at the end."""
        self.lock.truncate(0)
        self.lock.write(str(os.getpid()))
        self.lock.flush()
        self.owned = True

    def _lock(self) -> None:
        """Hold run.lock (the dir made again if a refused run's cleanup took it meanwhile)."""
        for _ in range(3):
            self.out.mkdir(parents=True, exist_ok=True)
            try:
                f = open(self.out / LOCK, "a+")
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                same = os.path.samestat(os.fstat(f.fileno()), os.stat(self.out / LOCK))
            except BlockingIOError:
                f.seek(0)
                holder = f.read(20).strip()
                f.close()
                raise ConfigError(f"{self.out} is in use by another run (pid {holder}): wait for "
                                  "it to end, or run in another dir") from None
            except FileNotFoundError:
                same = False  # its run ended and removed it: lock the next one
            if same:
                self.lock = f
                return
            f.close()
        raise ConfigError(f"{self.out}: could not take {LOCK}; run in another dir")

    def _new(self, cfg: DictConfig, overrides: list[str], hydra: Any) -> None:
        """A new run's .hydra/ as Hydra writes it; config.yaml last: it marks the dir used."""
        hydra_dir = self.out / ".hydra"
        hydra_dir.mkdir(exist_ok=True)
        files = {"overrides.yaml": OmegaConf.create(list(overrides)), "hydra.yaml": hydra,
                 "config.yaml": cfg}
        for name, node in files.items():
            if node is not None:
                write_atomic(hydra_dir / name, OmegaConf.to_yaml(node).encode())


def difference(theirs: dict, cfg: DictConfig, path: Path, skip: tuple[str, ...] = ()) -> str:
    """'key: X there, Y here' of up to three keys (outside `skip` and resume) whose resolved
    values differ, task, optimizer and ops first; '' when none does."""
    try:
        a = _flat(OmegaConf.to_container(OmegaConf.create(theirs), resolve=True))
    except OmegaConfBaseException as err:
        raise ConfigError(f"{path} cannot be read ({short(err)})") from None
    b = _flat({**OmegaConf.to_container(cfg, resolve=True), "resume": None})
    keys = [k for k in a.keys() | b.keys()
            if k.split(".")[0] not in (*skip, "resume") and a.get(k, ...) != b.get(k, ...)]
    rank = {key: i for i, key in enumerate(FIRST)}
    keys.sort(key=lambda k: (rank.get(k.split(".")[0], len(FIRST)), "_target_" not in k, k))
    if keys and keys[0].endswith("_target_"):  # another task or optimizer: its keys differ too
        keys = [k for k in keys if k.endswith("_target_")]
    return "; ".join(f"{k}: {short(a.get(k, '<none>'))} there, {short(b.get(k, '<none>'))} here"
                     for k in keys[:3])


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        return {prefix[:-1]: node}
    return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
