"""What TBLogger's figure-drawing worker runs first, in that worker: no torch here.

The worker draws figures for the process that started it and for nothing else, so it exits
when that process dies without stopping it (killed, out of memory). concurrent.futures stops
it at a normal exit, but would leave it waiting forever for work from a dead one: it holds
both ends of its own work queue.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from multiprocessing.connection import wait

from fitting.track.figures import preload


def start() -> None:
    """Import matplotlib ahead of the first figure, and exit once the parent process is gone."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()
    preload()


def _exit_with(sentinel: int) -> None:
    """Wait until `sentinel` (the parent process's) is ready, i.e. the parent has exited, then
    exit at once: there is nobody left to draw for, nor a result to hand back."""
    wait([sentinel])
    os._exit(1)
