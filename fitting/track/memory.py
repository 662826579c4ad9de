"""Peak memory: the process's peak RSS (every logged step, where the process is the run's own)
and a step's tensor peak (opt-in; once in a sweep whose jobs share a process)."""

import resource
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch


def shares_process() -> bool:
    """Whether this run is a job of a sweep whose jobs run one after another in one process
    (Hydra's basic launcher): the process's peak RSS is then not the job's own."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get() if HydraConfig.initialized() else None
    return bool(hydra and hydra.mode.name == "MULTIRUN"
                and hydra.runtime.choices.get("hydra/launcher") == "basic")


def peak_rss_bytes() -> int | None:
    """The process's peak resident set size so far, in bytes; None where it is not the run's
    own (shares_process)."""
    if shares_process():
        return None
    try:
        # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a job started from a
        # bigger process would report that process's peak.
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # macOS: bytes; else KiB


@dataclass
class Peak:
    """The block's peak tensor bytes above those live at its start, set when it exits."""

    bytes: int = 0


@contextmanager
def step_peak(device: torch.device | str) -> Iterator[Peak]:
    """Measure the most tensor bytes the block had allocated at once on `device` beyond those
    live at its start: CUDA's allocator stats, or on the CPU the profiler's memory records
    (costs milliseconds, hence opt-in)."""
    device, peak = torch.device(device), Peak()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        yield peak
        torch.cuda.synchronize(device)
        peak.bytes = torch.cuda.max_memory_allocated(device) - base
        return
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        yield peak
    records = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    running = 0
    for _, nbytes in records:
        running += nbytes
        peak.bytes = max(peak.bytes, running)
