"""profile=true: torch.profiler over a few training steps, after one skipped and one warm-up step.

It writes a Chrome trace (TRACE in the run dir; open it in https://ui.perfetto.dev) and logs the
ops that took the most self CPU time, so a custom op's cost shows next to its built-in twin's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

log = logging.getLogger(__name__)

TRACE = "profile.pt.trace.json"  # the name PyTorch's trace viewers look for
# Step 0 is skipped (first calls allocate and dispatch slowly), step 1 warms the profiler up,
# steps 2-4 are recorded.
WAIT, WARMUP, ACTIVE = 1, 1, 3
PROFILED_STEPS = WAIT + WARMUP + ACTIVE  # the steps the profiler is on for
TOP_OPS = 10


def _nothing() -> None:
    """The step hook when nothing is profiled."""


@contextmanager
def step_profiler(on: bool, out_dir: Path, device: torch.device) -> Iterator[Callable[[], None]]:
    """The function the training loop calls after each step: when `on`, it advances a
    torch.profiler whose trace and top-ops table are written as the recorded steps end (or as
    the block exits); otherwise it does nothing."""
    if not on:
        yield _nothing
        return
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    steps = [0]

    def step() -> None:
        steps[0] += 1
        prof.step()

    def ready(done: profile) -> None:
        if steps[0] <= WAIT + WARMUP:
            log.warning("profile=true: the run ended after %d steps, before the profiled "
                        "ones (steps %d to %d); no trace written", steps[0], WAIT + WARMUP + 1,
                        WAIT + WARMUP + ACTIVE)
            return
        path = out_dir / TRACE
        done.export_chrome_trace(str(path))
        table = done.key_averages().table(sort_by="self_cpu_time_total", row_limit=TOP_OPS)
        profiled = min(steps[0], WAIT + WARMUP + ACTIVE) - WAIT - WARMUP
        log.info("profile of %d steps after %d: trace %s (open it in https://ui.perfetto.dev); "
                 "top ops by self CPU time:\n%s", profiled, WAIT + WARMUP, path, table)

    plan = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    with profile(activities=activities, schedule=plan, on_trace_ready=ready) as prof:
        yield step
