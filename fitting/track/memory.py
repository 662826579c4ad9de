"""Peak memory of a training step: the tensor bytes at their peak, and the process's peak RSS.

- Tensor peak (`step_peak`): the most bytes of tensors the step had allocated at once beyond
  those live when it started. On CUDA from `torch.cuda.max_memory_allocated`; on the CPU from
  the allocation and free records of `torch.autograd.profiler.profile(profile_memory=True)`,
  summed in time order. (`torch.profiler.profile` would do the same, but it imports
  torch._inductor on start, seconds of start-up.)
- Peak RSS (`peak_rss_bytes`): the kernel's high-water mark of the process's resident memory,
  VmHWM of /proc/self/status on Linux, `getrusage(RUSAGE_SELF).ru_maxrss` elsewhere. Not
  ru_maxrss on Linux: it survives exec, so a process started from a bigger one (a benchmark's
  child, a test's subprocess) reports its parent's peak. It only grows: it is the run's peak
  so far, whatever step made it.

Profiling a step costs a few milliseconds, so the training loop measures the tensor peak on
sampled steps only (`StepMemory`); reading the peak RSS is free and done at every logged step.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

try:
    import resource
except ImportError:  # Windows: no getrusage
    resource = None

PEAK_TAG = "memory/peak_bytes"
RSS_TAG = "memory/peak_rss_bytes"
MIB = 1 << 20
_MEMORY_EVENT = "[memory]"


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
    prof = torch.autograd.profiler.profile(use_cpu=True, profile_memory=True)
    # The profiler's C++ side prints start/stop lines (and a warning about blocks allocated
    # before it started) on every session: noise in a training run's output.
    with quiet_native_stderr():
        prof.__enter__()
        try:
            yield peak
        finally:
            prof.__exit__(None, None, None)
    peak.bytes = _cpu_peak(prof)


def _cpu_peak(prof: torch.autograd.profiler.profile) -> int:
    """Highest running total of the CPU allocations minus frees a profile recorded."""
    # The chrome trace is the public form of the allocation records (bytes, in time order).
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    records = sorted(
        (e["ts"], e["args"]["Bytes"])
        for e in events
        if e.get("name") == _MEMORY_EVENT and e["args"].get("Device Type", 0) == 0
    )
    running = peak = 0
    for _, nbytes in records:
        running += nbytes
        peak = max(peak, running)
    return peak


@contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Send what native code writes to file descriptor 2 to /dev/null inside the block; Python's
    own `sys.stderr` (warnings, tracebacks) keeps printing where it did."""
    try:
        sys.stderr.flush()
        python_on_fd2 = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # replaced by an object without a file
        python_on_fd2 = False
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    before = sys.stderr
    if python_on_fd2:
        sys.stderr = open(saved, "w", closefd=False, encoding=before.encoding, errors="replace")
    try:
        yield
    finally:
        if python_on_fd2:
            sys.stderr.flush()
            sys.stderr = before
        os.dup2(saved, 2)
        os.close(saved)


@dataclass
class StepMemory:
    """Which steps of a run get their tensor peak measured, and what was measured.

    Sampled: the first logged step from step `first` on (default 1: step 0 allocates the
    optimizer's state, a one-off), then the first logged step at or after each multiple of
    `every` (0: no more).
    """

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
        if not (logged and step >= self._next):
            yield
            return
        with step_peak(self.device) as peak:
            yield
        self.peaks[step] = peak.bytes
        self._next = (step // self.every + 1) * self.every if self.every else math.inf

    def scalars(self, step: int) -> dict[str, float]:
        """The memory tags to log at `step`: peak RSS so far, and the tensor peak if sampled."""
        values = {RSS_TAG: float(peak_rss_bytes())}
        if step in self.peaks:
            values[PEAK_TAG] = float(self.peaks[step])
        return values

    @property
    def peak_bytes(self) -> int | None:
        """The highest tensor peak of the sampled steps (None before any was measured)."""
        return max(self.peaks.values(), default=None)


def describe_memory(memory: StepMemory | None) -> str:
    """The end-of-run memory line: tensor peak per step (and where sampled), peak RSS."""
    rss = f"process peak RSS {human_bytes(peak_rss_bytes())} (getrusage ru_maxrss)"
    if memory is None or memory.peak_bytes is None:
        return f"memory: {rss}"
    steps = ", ".join(str(s) for s in memory.peaks)
    return (
        f"memory: tensor peak per step {human_bytes(memory.peak_bytes)} above the step's "
        f"start (max over sampled steps {steps}); {rss}"
    )


def human_bytes(nbytes: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 ('1.5 MiB', '900 B')."""
    for unit in ("B", "KiB", "MiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.2f} GiB"
