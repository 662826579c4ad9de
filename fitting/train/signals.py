"""Stopping a run early without losing work: SIGINT/SIGTERM between steps, a non-finite loss or
gradient before its update, and the exceptions that say why a run stopped."""

from __future__ import annotations

import os
import re
import shlex
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

# Exit status of a run stopped by a non-finite loss or gradient (2 is a config error, 128+N a
# signal, as shells report them).
DIVERGED_EXIT = 3
# Exit status of a run that could not write to its run dir (disk full, dir gone or read-only):
# EX_IOERR of sysexits.h.
WRITE_FAILED_EXIT = 74


class RunStopped(Exception):
    """A run that stopped before its end with its events and checkpoint saved; train.py prints
    the message (no traceback) and exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Interrupted(RunStopped):
    """Stopped by SIGINT, SIGTERM or SIGHUP after finishing a step (and saving it); exit status
    128 + the signal."""

    def __init__(self, signum: int, step: int, steps: int, run_dir: str) -> None:
        name = signal.Signals(signum).name
        saved = last_checkpoint(step, str(Path(run_dir) / "checkpoint.pt"))
        super().__init__(f"interrupted by {name} after {step} of {steps} steps; {saved}",
                         128 + signum)
        self.signum, self.step = signum, step


def resume_command(run_dir: str) -> str:
    """The shell command that resumes `run_dir`; the path is quoted for Hydra's override
    grammar (and the shell) when it holds other characters, as a sweep job's dir does
    (0_impl=custom,task=mlp: `,` would make a sweep of it, `=` is refused)."""
    if re.fullmatch(r"[\w/.+-]+", run_dir):
        return f"python train.py resume={run_dir}"
    value = "resume='" + run_dir.replace("'", "\\'") + "'"
    if re.search(r'["$`\\!]', value):
        return f"python train.py {shlex.quote(value)}"
    return f'python train.py "{value}"'


class Diverged(RunStopped):
    """Stopped at the first step whose loss or gradient is not finite, before its update."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message, DIVERGED_EXIT)
        self.step = step


def last_checkpoint(saved_step: int | None, checkpoint: str) -> str:
    """Where the run can be resumed from: its last checkpoint and the command, if any."""
    if saved_step is None:
        return "no checkpoint was written yet: start the run again"
    path = Path(checkpoint)
    if not path.is_file():  # the run dir removed or replaced meanwhile
        gone = (f"{path} is gone" if path.parent.is_dir() else
                f"the run dir {path.parent} is no longer a directory" if path.parent.exists()
                else f"the run dir {path.parent} is gone")
        return f"{gone}: no checkpoint is left to resume from; start the run again"
    run_dir = str(path.parent)
    return (f"the last good checkpoint is {checkpoint} (after step {saved_step}); resume with: "
            f"{resume_command(run_dir)}")


class WriteFailed(RunStopped):
    """The run could not write to its run dir (disk full, dir gone or read-only)."""

    def __init__(self, err: OSError, saved_step: int | None, checkpoint: str) -> None:
        what = err.strerror or str(err)
        # os.fsdecode: TensorBoard's writer names its event file in bytes.
        where = f" {os.fsdecode(err.filename)}" if err.filename else ""
        super().__init__(
            f"could not write{where}: {what}; {last_checkpoint(saved_step, checkpoint)}",
            WRITE_FAILED_EXIT,
        )


class SecondSignal(Exception):
    """A second SIGINT/SIGTERM/SIGHUP: stop now, mid-step."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StoppedAtOnce(RunStopped):
    """Stopped mid-step by a second signal; the last checkpoint written is what remains."""

    def __init__(self, signum: int, saved_step: int | None, checkpoint: str) -> None:
        name = signal.Signals(signum).name
        where = last_checkpoint(saved_step, checkpoint)
        super().__init__(f"stopped at once by a second {name}; {where}", 128 + signum)


class StopSignals:
    """Inside the block SIGINT, SIGTERM and SIGHUP only set `received` (the loop stops after its
    current step, as a scheduler expects); a second one raises SecondSignal at once. The
    handlers in place before are restored on exit. Outside the main thread signals cannot be
    caught: nothing changes."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag the first time: logging from a signal handler can deadlock on its locks.
        if self.received is None:
            self.received = signum
            return
        raise SecondSignal(signum)


class NonFiniteStep(Exception):
    """Raised by the loop's closure, before the optimizer's update, at a non-finite loss or
    gradient."""

    def __init__(self, what: str, loss: float) -> None:
        super().__init__(f"non-finite {what}")
        self.what, self.loss = what, loss

    def describe(self, step: int, last_loss: float, task: Any) -> str:
        """The user's message for the step after `step` steps, naming the op that first went
        non-finite (fitting.train.diverged re-runs the step to find it)."""
        from fitting.train.diverged import first_nonfinite

        what = f"loss ({self.loss})" if self.what == "loss" else f"gradient (loss {self.loss:.6g})"
        last = f"last finite loss {last_loss:.6g} at step {step - 1}" if step else "the first step"
        culprit = first_nonfinite(task, task.batch(step))
        hint = f"; {culprit}" if culprit else "; try a smaller optimizer.lr"
        return (
            f"non-finite {what} at step {step} ({last}){hint}; stopped before its update, "
            "events and checkpoint.pt kept up to there"
        )
