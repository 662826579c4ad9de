"""Entry point: `python train.py [overrides]`; see `python train.py --help`."""

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig

import fitting.config  # noqa: F401  (registers the config schemas before Hydra composes)
from fitting.train.validate import ConfigError

log = logging.getLogger(__name__)

# Exit status of a config error (as argparse's usage errors); a stopped run has its own.
CONFIG_ERROR_EXIT = 2


class JobFailed(CompactHydraException):
    """A sweep's job that failed clearly: Hydra runs the other jobs, then prints this message
    without a traceback."""


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train with the composed config; return the final loss for Hydra sweepers."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        if cfg.resume is not None:
            if multirun:
                raise ConfigError("resume= continues one run: use it without -m/--multirun")
            from fitting.train.resume import resume_config

            cfg = resume_config(cfg, list(hydra_cfg.overrides.task), hydra_cfg.runtime.choices)
        from fitting.train.write_errors import raise_log_write_errors

        raise_log_write_errors()  # train.log failing to write stops the run as any other write
        from fitting.train.run import run  # validates cfg before torch loads

        loss = run(cfg, hydra_cfg.runtime.output_dir)
    except ConfigError as err:
        fail(f"config error: {err}", CONFIG_ERROR_EXIT, multirun)
    except Exception as err:
        from fitting.train.signals import Interrupted, RunStopped
        from fitting.train.write_errors import WriteFailed, write_failure

        err = write_failure(err, hydra_cfg.runtime.output_dir) or err
        if not isinstance(err, RunStopped):
            raise  # a bug: Hydra prints its traceback
        # An interrupted sweep stops (that is what Ctrl-C asks), and so does one that cannot
        # write (the next jobs would not either); a diverged job fails alone.
        fail(str(err), err.exit_code, multirun and not isinstance(err, (Interrupted, WriteFailed)))
    if multirun:
        sweep_dir = Path(hydra_cfg.sweep.dir).resolve()
        log.info("all jobs of the sweep: tensorboard --logdir %s", sweep_dir)
    return loss


def fail(message: str, exit_code: int, job_only: bool) -> None:
    """Report `message` once on stderr and in the job's log file, without a traceback; then exit
    with `exit_code`, or (`job_only`: a job of a sweep) fail only this job."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        # The console handler writes to stdout: the message goes to stderr instead, once.
        if isinstance(handler, logging.FileHandler):
            try:
                handler.handle(record)
                handler.flush()
            except OSError:  # the log file is what could not be written: stderr has it
                pass
    print(message, file=sys.stderr, flush=True)
    if job_only:
        raise JobFailed(message)
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
