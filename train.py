"""Entry point: `python train.py [overrides]`; see `python train.py --help`."""

import logging
import os
import signal
import sys


def _interrupted_early(signum, frame) -> None:
    """Ctrl-C while the app loads: one line, not an import's traceback."""
    print("interrupted by SIGINT before training started (nothing to resume)", file=sys.stderr)
    sys.exit(128 + signum)


signal.signal(signal.SIGINT, _interrupted_early)


import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.errors import CompactHydraException  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import fitting.config  # noqa: E402, F401  (registers the config schemas before Hydra composes)
from fitting.checks import ConfigError  # noqa: E402

log = logging.getLogger(__name__)

# Exit status of a config error (as argparse's usage errors); a stopped run has its own.
CONFIG_ERROR_EXIT = 2


class JobFailed(CompactHydraException):
    """A sweep's job that failed clearly: Hydra runs the other jobs, then prints this message
    without a traceback."""


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train with the composed config; return the final loss for Hydra sweepers."""
    from fitting.train.run import run
    from fitting.train.signals import Interrupted, RunStopped

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if cfg.resume is not None:
            if multirun:
                raise ConfigError("resume= continues one run: use it without -m/--multirun")
            from fitting.train.resume import resume_config

            cfg = resume_config(cfg, list(hydra_cfg.overrides.task), hydra_cfg.runtime.choices)
        return run(cfg, hydra_cfg.runtime.output_dir)
    except ConfigError as err:
        fail(f"config error: {err}", CONFIG_ERROR_EXIT, multirun)
    except KeyboardInterrupt:
        fail("interrupted by SIGINT before training started (nothing to resume)", 130, False)
    except RunStopped as err:
        # An interrupted sweep stops (that is what Ctrl-C asks); a diverged job fails alone.
        fail(str(err), err.exit_code, multirun and not isinstance(err, Interrupted))
    except SystemExit as err:  # a user op that calls sys.exit must not end the run as a success
        fail(f"a user op called sys.exit({err.code!r}) during the run; {user_ops(cfg)}", 1,
             multirun)


def user_ops(cfg: DictConfig) -> str:
    """The run's op choices, to name the op that may have exited."""
    return "the run's ops: " + ", ".join(f"ops.{k}={v}" for k, v in cfg.ops.items())


def fail(message: str, exit_code: int, job_only: bool) -> None:
    """Report `message` once on stderr and in the job's log file, without a traceback; then exit
    with `exit_code`, or (`job_only`: a job of a sweep) fail only this job."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    # A log file that cannot be written (a full disk) is left out quietly, not reported with a
    # traceback ("--- Logging error ---"): stderr has the message.
    raise_exceptions, logging.raiseExceptions = logging.raiseExceptions, False
    try:
        for handler in logging.getLogger().handlers:
            # The console handler writes to stdout: the message goes to stderr instead, once.
            if isinstance(handler, logging.FileHandler):
                try:
                    handler.handle(record)
                    handler.flush()
                except OSError:  # the log file is what could not be written: stderr has it
                    pass
    finally:
        logging.raiseExceptions = raise_exceptions
    print(message, file=sys.stderr, flush=True)
    if job_only:
        raise JobFailed(message)
    from models.ops.guard import still_running

    if still_running():  # a user op's timed-out call: torch would abort at interpreter exit
        sys.stdout.flush()
        os._exit(exit_code)
    sys.exit(exit_code)


if __name__ == "__main__":
    from fitting.command_line import overrides_problem

    problem = overrides_problem(sys.argv[1:])
    if problem:
        print(f"config error: {problem}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)
    main()
