"""Figures drawn in a helper process, so matplotlib's import (~0.4 s) and each drawing (~60 ms)
run on another core while the run imports torch and trains.

`start()` launches the process (the earlier the better: train.py does it before importing
torch); `drawer()` is the one FigureDrawer of this Python process, which every run in it
shares. The helper imports matplotlib but never torch, takes pickled FigureSpecs on its stdin,
writes each PNG and answers with its size. Without a spare core, or if the helper cannot start
or dies, figures are drawn in the run's own process instead: same PNG bytes, only slower.

    python -m fitting.track.figure_process   # the helper itself (started by FigureDrawer)
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from fitting.track.figures import FigureSpec, preload, render_png

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
# A figure takes ~60 ms to draw; a helper silent for this long is stuck, not busy.
ANSWER_TIMEOUT = 60.0


class Drawn(NamedTuple):
    """A figure written to `path` as PNG, `width`×`height` pixels."""

    path: Path
    width: int
    height: int


def draw_here(spec: FigureSpec, path: str | Path) -> Drawn:
    """Draw `spec` in this process and write it to `path` as PNG."""
    png, width, height = render_png(spec)
    Path(path).write_bytes(png)
    return Drawn(Path(path), width, height)


def spare_core() -> bool:
    """True when this process may run on at least two CPUs."""
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) >= 2


class FigureDrawer:
    """Draws FigureSpecs to PNG files: in the helper process when `background`, else here."""

    def __init__(self, background: bool) -> None:
        self._proc: subprocess.Popen | None = None
        self._requests: dict[int, tuple[FigureSpec, Path]] = {}  # sent, not answered yet
        # (path, width, height), or the helper's error message
        self._answers: dict[int, tuple | str] = {}
        self._next_id = 0
        self._cond = threading.Condition()
        if background:
            self._start()

    @property
    def background(self) -> bool:
        """True while figures go to the helper process."""
        return self._proc is not None

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "fitting.track.figure_process"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            )
        except OSError as err:
            log.warning("figures are drawn in this process: the drawing process failed (%s)", err)
            return
        threading.Thread(target=self._read_answers, args=(self._proc,), daemon=True).start()

    def _read_answers(self, proc: subprocess.Popen) -> None:
        # Blocked in read() almost always, which releases the GIL: no cost to the training.
        while True:
            try:
                request_id, answer = pickle.load(proc.stdout)
            except Exception:  # EOF or a torn message: the helper is gone
                break
            with self._cond:
                self._answers[request_id] = answer
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def submit(self, spec: FigureSpec, path: str | Path) -> int:
        """Start drawing `spec` into `path`; returns the id to ask `result` for."""
        request_id, self._next_id = self._next_id, self._next_id + 1
        path = Path(path).absolute()  # the helper may have another working directory
        if self._proc is not None:
            try:
                self._requests[request_id] = (spec, path)
                pickle.dump((request_id, tuple(spec), str(path)), self._proc.stdin)
                self._proc.stdin.flush()
                return request_id
            except (OSError, ValueError, pickle.PicklingError) as err:
                self._stop_helper(f"sending a figure failed ({err})")
        self._answers[request_id] = tuple(draw_here(spec, path))
        return request_id

    def ready(self, request_id: int) -> bool:
        """True once `result(request_id)` will not wait."""
        with self._cond:
            return request_id in self._answers or self._proc is None

    def result(self, request_id: int) -> Drawn:
        """The drawn figure `request_id`, waiting for it if need be."""
        deadline = time.monotonic() + ANSWER_TIMEOUT
        with self._cond:
            while (
                request_id not in self._answers
                and self._helper_alive()
                and time.monotonic() < deadline
            ):
                self._cond.wait(timeout=1.0)
            answer = self._answers.pop(request_id, None)
        request = self._requests.pop(request_id, None)
        if isinstance(answer, tuple):
            return Drawn(Path(answer[0]), *answer[1:])
        if answer is not None:  # the helper's error: draw here to raise it with a traceback
            log.warning("the drawing process failed on a figure: %s", answer)
        elif self._helper_alive():
            self._stop_helper(f"no answer from the drawing process in {ANSWER_TIMEOUT:g} s")
        else:
            self._stop_helper("the drawing process exited")
        spec, path = request
        return draw_here(spec, path)

    def _helper_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _stop_helper(self, reason: str) -> None:
        if self._proc is None:
            return
        log.warning("figures are drawn in this process from now on: %s", reason)
        proc, self._proc = self._proc, None
        proc.kill()
        proc.wait()

    def close(self) -> None:
        """Let the helper finish what it was sent and exit."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        try:
            proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()


_drawer: FigureDrawer | None = None


def start() -> FigureDrawer:
    """Start this process's drawer (idempotent): in the background when a core is spare."""
    global _drawer
    if _drawer is None:
        _drawer = FigureDrawer(background=spare_core())
        atexit.register(_drawer.close)
    return _drawer


def drawer() -> FigureDrawer:
    """This process's drawer, started on first use."""
    return start()


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """The helper's loop: draw each (id, spec, path) read from `requests` until EOF."""
    preload()
    while True:
        try:
            request_id, spec, path = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: Any = tuple(draw_here(FigureSpec(*spec), path))
        except Exception as err:  # reported to the run, which draws it itself to raise it
            answer = f"{type(err).__name__}: {err}"
        pickle.dump((request_id, answer), answers)
        answers.flush()


def main() -> None:
    """Entry point of the helper process."""
    # Ctrl-C reaches the whole process group: the run decides when to stop, then closes stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt answers
    serve(sys.stdin.buffer, answers)
    answers.close()
    sys.stderr.flush()
    # Every PNG is written and answered: skip the interpreter's teardown (~0.1 s with
    # matplotlib loaded), which the run would otherwise wait for at its own exit.
    os._exit(0)


if __name__ == "__main__":
    main()
