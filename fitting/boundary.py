"""The boundary around a user's code (its import, its op's forward and backward): every way it can
fail to return is one line (CannotRun), never a traceback, a hang or the process's end."""

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Seconds per call: generous for a real op on tiny inputs on a busy 2-core box; an op's first
# call may compile (torch.compile, Triton's JIT). The card's --call-limit, --first-call-limit;
# the app's limit.call_s, limit.first_call_s.
LIMITS = {"call": 30.0, "first call": 300.0}


class CannotRun(Exception):
    """The op cannot run as its slot calls it; the message is one line."""


class _Expired(BaseException):  # not an Exception: an op's `except Exception` cannot swallow it
    pass


def _expire(signum: int, frame: object) -> None:
    raise _Expired


@contextmanager
def guarded(first: bool = False) -> Iterator[None]:
    """User code inside: a time limit (SIGALRM, main thread; an outer timer, e.g. pytest-timeout's,
    is put back with its time left; `first`: a first call's), and sys.exit, KeyboardInterrupt, a
    hang or an exhausted memory as CannotRun."""
    main = threading.current_thread() is threading.main_thread()
    limit = LIMITS["first call" if first else "call"]
    if main:
        previous = signal.signal(signal.SIGALRM, _expire)
        outer, interval = signal.setitimer(signal.ITIMER_REAL, limit)
        start = time.monotonic()
    try:
        yield
    except _Expired:
        raise CannotRun(f"it did not return within {limit:g} s (the limit "
                        + ("for a first call, which may compile)" if first else
                           "per call): an endless loop or a wait?")) from None
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
