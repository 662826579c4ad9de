"""A run that could not write (full disk, run dir gone, replaced or read-only) as one line: the
path and the OS's reason, and the last good checkpoint with the command that continues from it.

Every write of a run raises OSError naming its file: checkpoint.pt (save_atomic), the event file
(fitting.track.thread_errors), train.log (raise_log_write_errors); train.py turns it into
WriteFailed with write_failure()."""

from __future__ import annotations

import errno
import functools
import logging
import os
import sys
import threading
from pathlib import Path

from fitting.train.signals import WRITE_FAILED_EXIT, RunStopped, resume_command
from fitting.train.validate import CHECKPOINT

# OS errors that only a write into a full or failing file system gives, whatever the path.
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG}
NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


class WriteFailed(RunStopped):
    """A run stopped by a failed write; exit status WRITE_FAILED_EXIT."""

    def __init__(self, message: str) -> None:
        super().__init__(message, WRITE_FAILED_EXIT)


def write_failure(err: BaseException, run_dir: str | Path) -> WriteFailed | None:
    """The WriteFailed to report for `err`, raised by a run writing into `run_dir`; None when
    `err` is not a failed write (a bug, left to its traceback)."""
    from fitting.track.thread_errors import settle

    if not isinstance(err, OSError):
        return None
    settle()  # the event writer's thread names its file as it ends
    first = err  # the first write that failed: later ones (e.g. on close) have it as context
    while isinstance(first.__context__, OSError):
        first = first.__context__
    run_dir = Path(run_dir).absolute()
    # TensorBoard's writer opens its event file by a bytes name.
    name = first.filename
    path = Path(os.fsdecode(name)).absolute() if isinstance(name, (str, bytes)) else None
    inside = path is not None and path.is_relative_to(run_dir)
    if first.errno not in DISK_ERRORS and not inside:
        return None
    reason = first.strerror or str(first)
    if not run_dir.exists():
        reason += f" (the run dir {run_dir} is gone)"
    elif not run_dir.is_dir():
        reason += f" (the run dir {run_dir} is no longer a directory)"
    fix = "there is free space" if first.errno in NO_SPACE else f"{run_dir} is writable again"
    return WriteFailed(f"could not write {path or run_dir}: {reason}; {_next(run_dir, fix)}")


def _next(run_dir: Path, fix: str) -> str:
    """What to do once `fix` is done: resume from the last good checkpoint, or run again."""
    from fitting.train.checkpoint import load
    from fitting.train.checkpoint_errors import CheckpointError

    if not run_dir.is_dir():
        return "no checkpoint is left to resume from: run the same command again to start afresh"
    if not (run_dir / CHECKPOINT).is_file():
        return f"no checkpoint was saved yet: once {fix}, run the same command again"
    try:
        step = load(run_dir)["step"]
    except CheckpointError:
        return f"{run_dir / CHECKPOINT} cannot be read back: once {fix}, start afresh"
    return (
        f"the last good checkpoint {run_dir / CHECKPOINT} (after step {step}) is intact; once "
        f"{fix}, continue with: {resume_command(str(run_dir))}"
    )


def raise_log_write_errors() -> None:
    """A failed write to a log file (train.log in the run dir) raises its OSError, naming the
    file, in the main thread, as any other failed write of the run; instead of logging's
    '--- Logging error ---' traceback on stderr and a run that goes on."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handleError = functools.partial(_log_write_failed, handler)  # type: ignore


def _log_write_failed(handler: logging.FileHandler, record: logging.LogRecord) -> None:
    """handler.handleError (called in handler.emit's except clause): re-raise an OSError."""
    err = sys.exc_info()[1]
    if isinstance(err, OSError) and threading.current_thread() is threading.main_thread():
        if err.filename is None:
            err.filename = handler.baseFilename
        raise err
    logging.FileHandler.handleError(handler, record)
