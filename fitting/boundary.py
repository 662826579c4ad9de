"""The boundary around a user's code (its import, its op's forward and backward): every way it can
fail to return is one line (CannotRun), never a traceback, a hang or the process's end."""

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

LIMIT_S = 30.0  # per call: generous for a real op on tiny inputs on a busy 2-core box
FIRST_LIMIT_S = 300.0  # an op's first call, which may compile (torch.compile, a JIT, a C++ build)


class CannotRun(Exception):
    """The op cannot run as its slot calls it; the message is one line."""


class _Expired(BaseException):  # not an Exception: an op's `except Exception` cannot swallow it
    pass


def _expire(signum: int, frame: object) -> None:
    raise _Expired


@contextmanager
def limits(per_call: float, first: float) -> Iterator[None]:
    """The time limits inside (the card's --limit/--first-limit, the app's op_limit_s...)."""
    global LIMIT_S, FIRST_LIMIT_S
    before, (LIMIT_S, FIRST_LIMIT_S) = (LIMIT_S, FIRST_LIMIT_S), (per_call, first)
    try:
        yield
    finally:
        LIMIT_S, FIRST_LIMIT_S = before


@contextmanager
def guarded(first: bool = False) -> Iterator[None]:
    """User code inside: a time limit (SIGALRM, main thread; an outer timer, e.g. pytest-timeout's,
    is put back with its time left; `first`: an op's first call's), and sys.exit,
    KeyboardInterrupt, a hang or an exhausted memory as CannotRun."""
    main, limit = threading.current_thread() is threading.main_thread(), \
        FIRST_LIMIT_S if first else LIMIT_S
    if main:
        previous = signal.signal(signal.SIGALRM, _expire)
        outer, interval = signal.setitimer(signal.ITIMER_REAL, limit)
        start = time.monotonic()
    try:
        yield
    except _Expired:
        if first:
            raise CannotRun(f"its first call did not return within {limit:g} s (the limit of a "
                            "first call, which may compile: --first-limit, op_first_limit_s)"
                            ) from None
        raise CannotRun(f"it did not return within {limit:g} s (the limit per call, after the "
                        "first: --limit, op_limit_s): an endless loop or a wait?") from None
    except SystemExit as err:
        raise CannotRun(f"it called sys.exit({err.code!r}); an op returns or raises") from None
    except KeyboardInterrupt:
        raise CannotRun("it raised KeyboardInterrupt (or Ctrl-C stopped it)") from None
    except (MemoryError, RuntimeError) as err:
        text = str(err)
        if not isinstance(err, MemoryError | torch.OutOfMemoryError) and \
                "allocate memory" not in text and "out of memory" not in text:
            raise
        raise CannotRun(f"it ran out of memory: {text.splitlines()[0][:200] if text else ''}"
                        ) from None
    finally:
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer:
                left = max(outer - (time.monotonic() - start), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, interval)


def form(obj: object) -> str:
    """What a call returned, in words: `tensor (4, 8) float32`, `tuple of 3 tensors`, `int`."""
    if isinstance(obj, torch.Tensor):
        return f"tensor {tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
    if isinstance(obj, list | tuple):
        return f"{type(obj).__name__} ({', '.join(form(o) for o in obj)})"
    return type(obj).__name__
