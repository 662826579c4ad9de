"""hydra/launcher=slurm (conf/hydra/launcher/slurm.yaml): submitit's SLURM launcher, except that
a job that fails or never completes (scancel, a lost node) fails alone: the sweep waits for every
job, writes its end for the others, then names the jobs that did not complete (exit 1)."""

import contextlib
import io
import logging
from collections.abc import Sequence
from pathlib import Path

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.errors import CompactHydraException
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as Submitit
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


class JobsNotCompleted(CompactHydraException):
    """Jobs of a sweep that failed or that SLURM ended before they returned."""


class SlurmLauncher(Submitit):
    """submitit_slurm whose jobs fail alone (see the module's docstring)."""

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit the jobs as one SLURM array and wait for all of them."""
        import submitit

        params = dict(self.params)
        delay, limit = params["signal_delay_s"], params["timeout_min"] * 60
        if delay >= limit:  # USR2 as the job starts: each attempt requeued, none trains
            raise CompactHydraException(
                f"hydra.launcher.signal_delay_s={delay} is not below timeout_min="
                f"{params['timeout_min']} ({limit} s): SLURM's USR2 would come as each job "
                "starts; give a larger timeout_min or a smaller signal_delay_s")
        if limit - delay < 60:
            log.warning(f"hydra.launcher: SLURM sends USR2 up to 60 s before signal_delay_s="
                        f"{delay}; with timeout_min={params['timeout_min']} a job may get it as "
                        "it starts")
        executor = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                                         slurm_max_num_timeout=params.pop("max_num_timeout"))
        # The plugin's own split: the keys every executor knows, the rest prefixed slurm_.
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{key if key in shared else f"slurm_{key}": v for key, v in params.items()})
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Submitit 'slurm' sweep output dir : {sweep_dir}")
        nums = range(initial_job_idx, initial_job_idx + len(job_overrides))
        for num, overrides in zip(nums, job_overrides, strict=True):
            log.info(f"\t#{num} : {' '.join(filter_overrides(overrides))}")
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's stderr
                jobs = executor.map_array(
                    self, [list(o) for o in job_overrides], ["hydra.sweep.dir"] * len(nums),
                    list(nums), [f"job_id_for_{n}" for n in nums],
                    [Singleton.get_state()] * len(nums))
        except RuntimeError as err:  # sbatch refused a partition, account, qos, time; no SLURM
            said = [line for line in str(err).splitlines() if line.strip()][-1:]
            raise CompactHydraException(f"SLURM refused the sweep's jobs: {''.join(said)}; "
                                        "check hydra.launcher.*") from None
        returns, problems = _outcomes(submitit, nums, job_overrides, jobs)
        if problems:
            # Hydra ends the sweep only after every job returned: end it here for the others.
            with contextlib.suppress(SystemExit):  # its exit 1: this line says more
                self.hydra_context.callbacks.on_multirun_end(
                    config=self.config, config_name=self.config.hydra.job.config_name)
            raise JobsNotCompleted(f"{len(problems)} of {len(nums)} jobs did not complete: "
                                   + "; ".join(problems))
        return returns


def _outcomes(submitit, nums: range, job_overrides, jobs) -> tuple[list[JobReturn], list[str]]:
    """Each job's return, and a line for each job that failed or never completed."""
    returns, problems = [], []
    for num, overrides, job in zip(nums, job_overrides, jobs, strict=True):
        name = f"#{num} ({' '.join(filter_overrides(overrides))}, SLURM job {job.job_id})"
        try:
            ret = job.results()[0]
        except submitit.core.utils.UncompletedJobError:
            problems.append(f"{name}: {job.state}")
            continue
        except Exception as err:  # raised outside the run: submitit has the traceback
            last = [line for line in str(err).splitlines() if line.strip()][-1:]
            problems.append(f"{name} failed: {''.join(last)} (its log: {job.paths.stderr})")
            continue
        if ret.status != JobStatus.COMPLETED:
            problems.append(f"{name} failed: {ret._return_value}")
        returns.append(ret)
    return returns, problems
