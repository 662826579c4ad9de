"""Entry point: `python train.py [overrides]`; see `python train.py --help`."""

import multiprocessing
import os
import signal
import sys
import threading

SWEEP = any(arg in ("-m", "--multirun") for arg in sys.argv[1:])
LEFT: list[threading.Thread] = []  # threads a job's user code left running (not daemon)
EXIT = {"code": 1}  # the status the end's SIGALRM exits with, once LEFT keeps Python's exit


def stopped(signum: int, frame: object) -> None:
    """A signal outside the training steps (loading, the end, a sweep waiting on its jobs), or
    the end's SIGALRM: Python's exit waits on LEFT forever, so the process ends without them."""
    if signum == signal.SIGALRM:
        os._exit(EXIT["code"])
    sweep_dir = os.environ.get("FITTING_SWEEP_DIR", "its sweep dir")
    where = ("the sweep stops waiting; its local and joblib jobs checkpoint and stop, SLURM's run "
             f"on (scancel checkpoints them); where each job stands: python -m fitting.compare "
             f"{sweep_dir}" if SWEEP else "outside the training steps, nothing to checkpoint")
    print(f"stopped by {signal.Signals(signum).name}: {where}", file=sys.stderr, flush=True)
    os._exit(128 + signum)  # at once: no shutdown that waits on the sweep's workers


for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
    signal.signal(_signum, stopped)

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from fitting.config import ConfigError, misspelled, register, short  # noqa: E402

register()  # the schema and resolvers conf/ needs, before Hydra composes (its jobs inherit them)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train with the composed config; the final loss (NaN for a sweep's job that failed)."""
    from fitting.loop import Stopped
    from fitting.run import failed, run

    hydra, sweep_job = HydraConfig.get(), HydraConfig.get().mode.name == "MULTIRUN"
    before = set(threading.enumerate())
    try:
        loss = run(cfg, hydra.runtime.output_dir)
        if left := [t for t in set(threading.enumerate()) - before if not t.daemon]:
            LEFT.extend(left)
            if hydra.runtime.choices.get("hydra/launcher") not in ("basic", "joblib"):  # SLURM's
                signal.signal(signal.SIGALRM, stopped)
                signal.alarm(10)  # for submitit to write its result, then stopped() ends it
            raise Stopped(f"your code left threads running ({', '.join(t.name for t in left)})"
                          ": the process ends without waiting for them; start them with "
                          "daemon=True, or join them", 1)
        return loss
    except Exception as err:
        if not sweep_job and not isinstance(err, ConfigError | Stopped):
            raise  # a bug: its traceback
        message, code = err.args if isinstance(err, Stopped) else (
            f"config error: {err}", 2) if isinstance(err, ConfigError) else (
            f"{type(err).__name__}: {short(err, 300)}", 1)
        print(message, file=sys.stderr, flush=True)
        if code >= 128 and hydra.runtime.choices.get("hydra/launcher") == "joblib":
            # A joblib worker whose sweep stops: its run is saved; it ends as the signal's own
            # action ends a process, or it would idle on past its sweep (loky keeps workers).
            signal.signal(code - 128, signal.SIG_DFL)
            signal.raise_signal(code - 128)
        # A signal stops a sweep; any other failure of a sweep's job fails it alone: its row in
        # the sweep's end (results.json: the line, the exit status), the other jobs run on.
        if not sweep_job or code >= 128:
            sys.exit(code)
        failed(hydra.runtime.output_dir, message, code, err)
    return float("nan")


if __name__ == "__main__":
    if SWEEP and any(arg.startswith("resume=") for arg in sys.argv[1:]):
        print("config error: resume= continues one run: leave -m/--multirun out", file=sys.stderr)
        sys.exit(2)
    if wrong := misspelled([a for a in sys.argv[1:] if not a.startswith("hydra")]):
        print(f"config error: {wrong}", file=sys.stderr)
        sys.exit(2)
    code = 0
    try:
        main()
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 1
    for worker in multiprocessing.active_children():  # joblib's, idle: one may never exit
        worker.terminate()  # (a job's user code left a thread running in it)
    if any(thread.is_alive() for thread in LEFT):
        EXIT["code"] = code or 1
        signal.alarm(1)  # a second for them to end, then stopped() ends the process
    sys.exit(code)
