"""Peak memory of a training step: the tensor bytes at their peak, and the process's peak RSS.

- Tensor peak (`step_peak`): the most bytes of tensors the step had allocated at once beyond
  those live when it started. On CUDA from `torch.cuda.max_memory_allocated`; on the CPU from
  the allocation and free records of `torch.autograd.profiler.profile(profile_memory=True)`,
  summed in time order. Profiling a step costs milliseconds, so it is opt-in
  (log.memory_every), and the profiler prints its start/stop lines on stderr.
- Peak RSS (`peak_rss_bytes`): the kernel's high-water mark of the process's resident memory,
  VmHWM of /proc/self/status on Linux (not getrusage's ru_maxrss, which survives exec, so a
  process started from a bigger one reports its parent's peak), ru_maxrss elsewhere.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

try:
    import resource
except ImportError:  # Windows: no getrusage
    resource = None

PEAK_TAG = "memory/peak_bytes"
RSS_TAG = "memory/peak_rss_bytes"


@dataclass
class Peak:
    """What `step_peak` measured: the block's peak tensor bytes above its start (after it)."""

    bytes: int = 0


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far, in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # in kB
    except OSError:  # no /proc: not Linux
        pass
    if resource is None:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS: bytes; Linux: KiB


@contextmanager
def step_peak(device: torch.device | str) -> Iterator[Peak]:
    """Measure the peak tensor bytes the block allocates on `device` above those live at its
    start; `peak.bytes` is set when the block exits."""
    device = torch.device(device)
    peak = Peak()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        yield peak
        torch.cuda.synchronize(device)
        peak.bytes = torch.cuda.max_memory_allocated(device) - base
        return
    with torch.autograd.profiler.profile(use_cpu=True, profile_memory=True) as prof:
        yield peak
    running = 0
    for _, nbytes in _cpu_records(prof):
        running += nbytes
        peak.bytes = max(peak.bytes, running)


def _cpu_records(prof: torch.autograd.profiler.profile) -> list[tuple[int, int]]:
    """(time, bytes) of the CPU allocations (+) and frees (−) the profile recorded, in order."""
    return sorted(
        (event.start_ns(), event.nbytes())
        for event in prof.kineto_results.events()
        if event.name() == "[memory]" and str(event.device_type()).endswith("CPU")
    )


@dataclass
class StepMemory:
    """Which steps get their tensor peak measured (the first logged step from `first` on, then
    from each multiple of `every`; every=0: none), and what was measured. `first` defaults to
    1: step 0 allocates the optimizer's state, a one-off."""

    device: torch.device
    every: int
    first: int = 1
    peaks: dict[int, int] = field(default_factory=dict)  # step -> peak tensor bytes

    def __post_init__(self) -> None:
        self._next = self.first

    @contextmanager
    def measure(self, step: int, logged: bool) -> Iterator[None]:
        """Measure the tensor peak of the block if `step` is sampled (`logged`: the loop logs
        this step)."""
        if not (self.every and logged and step >= self._next):
            yield
            return
        with step_peak(self.device) as peak:
            yield
        self.peaks[step] = peak.bytes
        self._next = (step // self.every + 1) * self.every

    def scalars(self, step: int) -> dict[str, float]:
        """The memory tags to log at `step`: peak RSS so far, and the tensor peak if sampled."""
        values = {RSS_TAG: float(peak_rss_bytes())}
        if step in self.peaks:
            values[PEAK_TAG] = float(self.peaks[step])
        return values


def human_bytes(nbytes: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 ('1.5 MiB', '900 B')."""
    for unit in ("B", "KiB", "MiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.2f} GiB"

