"""Entry point: `python train.py [overrides]`; see `python train.py --help`."""

import os
import signal
import sys

MULTIRUN = any(arg in ("-m", "--multirun") for arg in sys.argv[1:])


def stopped(signum: int, frame: object) -> None:
    """A signal outside the training steps (the app loading or ending, a sweep's parent waiting
    on its jobs): one line, not a traceback."""
    where = ("the sweep stops; its jobs still training checkpoint and stop, and each job dir's "
             "results.json says where it ended" if MULTIRUN else
             "outside the training steps, nothing to checkpoint")
    print(f"stopped by {signal.Signals(signum).name}: {where}", file=sys.stderr, flush=True)
    os._exit(128 + signum)  # at once: no interpreter shutdown that would wait on workers


for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_signum, stopped)

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from fitting.config import ConfigError  # noqa: E402  (registers the schema before Hydra composes)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train with the composed config; return the final loss (a sweeper's objective)."""
    from fitting.loop import Stopped
    from fitting.run import run

    job_only = MULTIRUN or HydraConfig.get().mode.name == "MULTIRUN"
    try:
        return run(cfg, HydraConfig.get().runtime.output_dir)
    except ConfigError as err:
        fail(f"config error: {err}", 2, job_only)
    except Stopped as err:  # a signal stops a whole sweep; a diverged job fails alone
        fail(str(err), err.code, job_only and err.code < 128)
    return float("nan")


def fail(message: str, code: int, job_only: bool) -> None:
    """Print `message` once on stderr; exit with `code`, or (a job of a sweep) return, so the
    other jobs run and the sweep's end reports this one as not completed."""
    print(message, file=sys.stderr, flush=True)
    if not job_only:
        sys.exit(code)


if __name__ == "__main__":
    if MULTIRUN and any(arg.startswith("resume=") for arg in sys.argv[1:]):
        print("config error: resume= continues one run: leave -m/--multirun out", file=sys.stderr)
        sys.exit(2)
    main()
