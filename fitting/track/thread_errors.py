"""A failed write in the TensorBoard writer's own thread (full disk, run dir gone): the
SummaryWriter raises that OSError again in the main thread at its next write, flush or close,
where the app reports it once; so the thread itself does not print it ('Exception in thread'),
and the error names the event file, which the OS error alone does not."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The writer threads, each with the dir of its event files.
_writers: weakref.WeakKeyDictionary[threading.Thread, Path] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_previous = [threading.excepthook]  # the hook that _hook replaced
_opening: list[tuple[set[threading.Thread], Path]] = []  # blocks under way: threads before


@contextmanager
def writer_threads(log_dir: str | Path) -> Iterator[None]:
    """The threads started inside the block write event files to `log_dir`: an OSError that
    ends one is not printed, and gets the event file as its filename."""
    before = set(threading.enumerate())
    opening = (before, Path(log_dir))  # a thread may fail before the block ends
    with _lock:
        if threading.excepthook is not _hook:
            _previous[0] = threading.excepthook
            threading.excepthook = _hook
        _opening.append(opening)
    try:
        yield
    finally:
        with _lock:
            _opening.remove(opening)
            for thread in set(threading.enumerate()) - before:
                _writers[thread] = Path(log_dir)


def settle(timeout: float = 5.0) -> None:
    """Wait until the writer threads have ended (closed writers end at once, a failed one as
    soon as its error has its file named), for at most `timeout` seconds in all."""
    deadline = time.monotonic() + timeout
    for thread in list(_writers):
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def event_file(log_dir: Path) -> Path:
    """This process's newest event file in `log_dir` (`log_dir` itself when there is none):
    TensorBoard names them events.out.tfevents.<time>.<host>.<pid>.<n>, time first."""
    mine = [p for p in log_dir.glob("events.out.tfevents.*") if f".{os.getpid()}." in p.name]
    return max(mine, key=lambda p: p.name, default=log_dir)


def _hook(args: threading.ExceptHookArgs) -> None:
    """threading.excepthook: a writer thread's OSError gets its file named and is not printed;
    anything else goes to the hook that was in place before."""
    with _lock:
        log_dir = _writers.get(args.thread) if args.thread is not None else None
        for before, opening_dir in _opening:
            if log_dir is None and args.thread not in before:
                log_dir = opening_dir
    if log_dir is not None and isinstance(args.exc_value, OSError):
        if args.exc_value.filename is None:
            args.exc_value.filename = str(event_file(log_dir))
        return
    _previous[0](args)
