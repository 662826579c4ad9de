"""Torch threads per job when a Hydra launcher runs jobs side by side: jobs x threads <= cores.

With `hydra/launcher=joblib` (n_jobs=-1: one job per core by default) each job runs in a loky
worker process. Loky already sets OMP_NUM_THREADS = cores // n_jobs in its workers, which
torch's default (threads=0) follows; an explicit `threads=N` would override it, so it is
limited here, with a warning.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)

# Launchers whose jobs share this machine's cores, and their key for the concurrent job count.
LOCAL_PARALLEL = {"JoblibLauncher": "n_jobs"}


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity; os.cpu_count() where unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def concurrent_jobs(launcher: Any, cores: int) -> int:
    """How many jobs `launcher` (hydra.launcher's config) runs at once on this machine: 1 for
    launchers that run one job at a time or elsewhere (basic, submitit)."""
    target = str(launcher.get("_target_", "")) if launcher is not None else ""
    key = next((k for name, k in LOCAL_PARALLEL.items() if target.endswith(name)), None)
    if key is None:
        return 1
    n_jobs = launcher.get(key)
    if n_jobs is None:
        return 1
    n_jobs = int(n_jobs)
    # joblib's convention: -1 is every core, -2 all but one, ...
    return max(1, cores + 1 + n_jobs if n_jobs < 0 else n_jobs)


def limit_threads(threads: int, jobs: int, cores: int) -> int:
    """`threads` (0: torch's default, one per core) limited to cores // jobs when jobs > 1."""
    if jobs <= 1:
        return threads
    budget = max(1, cores // jobs)
    if jobs > cores:
        log.warning("%d jobs at once on %d cores: they share cores, each with 1 thread",
                    jobs, cores)
    if threads == 0:
        return budget
    if threads > budget:
        log.warning("threads=%d with %d jobs at once on %d cores: using %d thread(s) per job",
                    threads, jobs, cores, budget)
        return budget
    return threads


def job_threads(threads: int) -> int:
    """Torch threads for this job: `threads`, limited so that the jobs that Hydra's launcher
    runs at once use at most one thread per core. Outside Hydra, `threads` as given."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return threads
    cores = cpu_cores()
    return limit_threads(threads, concurrent_jobs(HydraConfig.get().launcher, cores), cores)
