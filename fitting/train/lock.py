"""One writer per run dir: an advisory lock on `<run dir>/run.lock`, held while the run lives.

The OS drops the lock with the process, so a killed run never leaves a lock that blocks; the
file keeps the pid of the last holder, which a refused run names."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fitting.checks import ConfigError

LOCK = "run.lock"


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run dir's lock inside the block; ConfigError if another process holds it."""
    path = run_dir / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise ConfigError(
                f"{run_dir} is in use by another run (pid {holder}): two runs in one dir would "
                "overwrite each other's checkpoint; wait for it to end, stop it, or use another "
                "hydra.run.dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the file drops the lock
