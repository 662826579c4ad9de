"""Call a user's op so that nothing it does can pass for success: an exception stays an
exception, while sys.exit, any other BaseException and a call that never returns become an
`OpAborted` naming what happened."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

THREAD_NAME = "user-op"


def still_running() -> bool:
    """True while a call that timed out is still running (in a daemon thread)."""
    return any(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate())


class OpAborted(Exception):
    """The op ended a call by sys.exit or another BaseException, or did not return in time."""


def call_guarded(fn: Callable[..., Any], *args: Any, timeout: float, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in a daemon thread joined with `timeout` seconds; its Exception is
    re-raised, anything else (SystemExit, GeneratorExit, a hang) raises OpAborted."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - SystemExit & co. must not end the caller
            box["error"] = err

    # A daemon thread: an op that never returns cannot keep the process alive at exit.
    thread = threading.Thread(target=run, name=THREAD_NAME, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise OpAborted(f"did not return within {timeout:g} s (an endless loop, or a deadlock?)")
    err = box.get("error")
    if err is None:
        return box.get("result")
    if isinstance(err, KeyboardInterrupt):
        raise err
    if isinstance(err, SystemExit):
        raise OpAborted(f"called sys.exit({err.code!r}); an op must return a tensor or raise")
    if not isinstance(err, Exception):
        raise OpAborted(f"raised {type(err).__name__} (a BaseException, not an Exception)")
    raise err
