"""One measurement point of the memory benchmarks, run in a fresh process and printed as JSON.

`python -m fitting.bench.cnn_step memory --impl custom --batch 1024`: the app's cnn (default
channels, 32x32 images) trains a few steps (forward, MSE, backward, adam), then reports its
tensor peak per step, the peak RSS before and after the steps, and step times.
`... time --batch 1024`: custom and builtin step times, alternated in one process
(torch.utils.benchmark), for a side-by-side ratio.

A fresh process per point because a process's peak RSS never goes down. Every point runs on
glibc malloc as shipped, as the app does.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable

import torch

from fitting.bench.report import malloc_note
from fitting.track.memory import peak_rss_bytes, step_peak
from models.cnn import CurveCNN

IMAGE_SIZE = 32
CHANNELS = (8, 16)  # the cnn task's defaults
WARMUP_STEPS = 1  # the first step allocates adam's state


def training_step(
    impl: str, batch: int, device: str = "cpu", seed: int = 0
) -> Callable[[], None]:
    """A closure running one cnn training step (forward, MSE, backward, adam) on fixed data."""
    g = torch.Generator().manual_seed(seed)
    model = CurveCNN(IMAGE_SIZE, CHANNELS, impl=impl, device=device)
    images = torch.rand(batch, 1, IMAGE_SIZE, IMAGE_SIZE, generator=g).to(device)
    targets = torch.randn(batch, 4, generator=g).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad()
        loss = (model(images) - targets).pow(2).mean()
        loss.backward()
        optimizer.step()

    return step


def measure_memory(impl: str, batch: int, steps: int, device: str = "cpu") -> dict:
    """Peak RSS before/after `steps` training steps, their times, CPU time and page faults,
    then one step's tensor peak (on CUDA: max_memory_allocated above the step's start)."""
    step = training_step(impl, batch, device)
    rss_start = peak_rss_bytes()
    times = []
    for i in range(WARMUP_STEPS + steps):
        if i == WARMUP_STEPS:
            usage = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        step()
        if device != "cpu":
            torch.cuda.synchronize()
        if i >= WARMUP_STEPS:
            times.append((time.perf_counter() - t0) * 1e3)
    rss_peak = peak_rss_bytes()  # read before the profiled step, whose records take memory
    # CPU time and page faults: less sensitive than wall time to other processes' load.
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    with step_peak(device) as peak:
        step()
    return {
        "impl": impl,
        "batch": batch,
        "tensor_peak_bytes": peak.bytes,
        "rss_start_bytes": rss_start,
        "rss_peak_bytes": rss_peak,
        "step_ms": statistics.median(times),
        "cpu_ms": cpu_s / steps * 1e3,
        "faults": (after.ru_minflt - usage.ru_minflt) // steps,
    }


def measure_time(batch: int, rounds: int, min_run_time: float, device: str = "cpu") -> dict:
    """Median step ms of custom and builtin, measured in alternating rounds in this process."""
    from torch.utils.benchmark import Timer

    steps = {impl: training_step(impl, batch, device) for impl in ("custom", "builtin")}
    samples: dict[str, list[float]] = {impl: [] for impl in steps}
    for step in steps.values():
        step()  # warm-up: adam's state
    for _ in range(rounds):
        for impl, step in steps.items():
            m = Timer("step()", globals={"step": step}).blocked_autorange(
                min_run_time=min_run_time
            )
            samples[impl] += [t * 1e3 for t in m.times]
    return {"batch": batch, **{f"{impl}_ms": statistics.median(s) for impl, s in samples.items()}}


def main(argv: list[str] | None = None) -> None:
    """CLI of one point; prints one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m fitting.bench.cnn_step", description=__doc__)
    parser.add_argument("what", choices=("memory", "time"))
    parser.add_argument("--impl", choices=("custom", "builtin"), default="custom")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up")
    parser.add_argument("--rounds", type=int, default=3, help="alternations (time)")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds a round (time)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the app's 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.what == "memory":
        result = measure_memory(args.impl, args.batch, args.steps, args.device)
    else:
        result = measure_time(args.batch, args.rounds, args.min_run_time, args.device)
    result["malloc"] = malloc_note()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
