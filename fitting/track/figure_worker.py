"""The process that draws TBLogger's figures: started once per process, torch-free.

Parent side: `figure_drawer` starts the worker (a one-process ProcessPoolExecutor) on first
use; a run calls it before torch loads, so the worker imports matplotlib on another core
meanwhile. Worker side: `start`, its first task, which preloads matplotlib and exits the
worker when the process that started it dies without stopping it (killed, out of memory):
concurrent.futures stops it at a normal exit, but would leave it waiting forever for work
from a dead one, since it holds both ends of its own work queue.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.connection import wait

from fitting.track.figures import preload

_drawer: ProcessPoolExecutor | None = None  # the figure worker of this process


def figure_drawer() -> ProcessPoolExecutor:
    """This process's figure-drawing worker, started on first use (and after one died).

    One worker process draws the figures, so matplotlib's import and drawing run on another
    core than the training; the runs of one process (a multirun's jobs) share it rather than
    each paying for a fresh interpreter. It imports matplotlib as it starts, ready for the first
    figure, and never imports torch.

    Started by multiprocessing's fork server where the platform has one (else "spawn"): a fork
    of this process, which may run torch's threads, would be unsafe, while the server is a fresh
    interpreter. A worker forked from it exits without tearing its interpreter down, and the
    end of a run waits for that exit (concurrent.futures joins its workers): a spawned worker
    spent it freeing matplotlib's objects. The server preloads nothing, because starting the
    worker waits until the server is up.
    """
    global _drawer
    if _drawer is None:
        if "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([])
        else:
            context = multiprocessing.get_context("spawn")
        _drawer = ProcessPoolExecutor(max_workers=1, mp_context=context)
        _drawer.submit(start)
    return _drawer


def forget_drawer(drawer: ProcessPoolExecutor) -> None:
    """After `drawer`'s worker died: the next figure_drawer() starts a fresh one."""
    global _drawer
    if _drawer is drawer:
        _drawer = None
        drawer.shutdown(wait=False, cancel_futures=True)


def start() -> None:
    """In the worker: import matplotlib ahead of the first figure, and exit once the parent
    process is gone."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()
    preload()


def _exit_with(sentinel: int) -> None:
    """Wait until `sentinel` (the parent process's) is ready, i.e. the parent has exited, then
    exit at once: there is nobody left to draw for, nor a result to hand back."""
    wait([sentinel])
    os._exit(1)
