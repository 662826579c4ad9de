"""`python train.py ARGS` run inside the test process: Hydra's command line, composition, job
logging, `train.main`, its one-line errors and its exit status, without a fresh interpreter
(each of which imports torch again). Tests of what only a real process shows (signals, stderr
of other threads, import cost) launch `python train.py` instead."""

from __future__ import annotations

import copy
import logging
import os
import runpy
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra.core.singleton import Singleton

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "train.py")


def user_env() -> dict[str, str]:
    """The environment for a `python train.py` subprocess as a user runs it: this one without
    HYDRA_FULL_ERROR (with it, Hydra prints a traceback where the app prints one line)."""
    return {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}


@dataclass
class Finished:
    """What a run of train.py left: as subprocess.CompletedProcess names them."""

    returncode: int
    stdout: str
    stderr: str


def run_train(
    args: list[str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Finished:
    """Run `python train.py *args` from the repo root in this process; its exit status and
    what it wrote to stdout and stderr (file descriptors 1 and 2)."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)  # as a user runs it
    monkeypatch.setattr(sys, "argv", [TRAIN, *args])
    root = logging.getLogger()
    log_handlers, level = root.handlers[:], root.level
    hydra_state = copy.deepcopy(Singleton.get_state())  # as Hydra's hydra_restore_singletons
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    capfd.readouterr()
    code = 0
    try:
        runpy.run_path(TRAIN, run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    finally:
        # Hydra configures the root logger (a console handler, the job's train.log) and keeps
        # its global state (HydraConfig, ...) after the run: both are put back as they were.
        for handler in root.handlers:
            if handler not in log_handlers:
                handler.close()
        root.handlers[:] = log_handlers
        root.setLevel(level)
        Singleton.set_state(hydra_state)
        for signum, handler in handlers.items():  # train.py's own: for its process alone
            signal.signal(signum, handler)
    out, err = capfd.readouterr()
    return Finished(code, out, err)
