"""The card's cost row: an op's forward+backward time (torch.utils.benchmark's median and IQR),
the bytes it saves for backward and a step's tensor peak, against its reference's, at the size
its model calls it."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils import benchmark

from fitting.boundary import guarded
from fitting.track.memory import step_peak
from fitting.verdict import Finding, Sample, call_on, incoming, leaves_of, parts_of
from models.ops import saved_tensor_bytes


def _size(n: float, unit: str) -> str:
    """n in a readable unit: 85.1 µs, 64.0 KiB."""
    steps = [(1e-6, "µs"), (1e-3, "ms"), (1.0, "s")] if unit == "s" else \
        [(1, "B"), (1024, "KiB"), (1024**2, "MiB"), (1024**3, "GiB")]
    scale, name = next(((s, u) for s, u in reversed(steps) if n >= s), steps[0])
    return f"{n / scale:.3g} {name}"


def measure(fn: Callable, sample: Sample, names: list[str], seconds: float) -> dict[str, float]:
    """Median and IQR seconds of forward+backward, saved bytes and tensor peak of fn on sample."""
    parts = parts_of(sample, names)
    params = {p: t.requires_grad_() for p, t in leaves_of(parts).items()}
    device = next(iter(params.values())).device

    def step() -> None:
        outs = [o for o in call_on(fn, parts, params) if o.requires_grad]
        torch.autograd.grad(outs, list(params.values()),
                            [incoming(o, k) for k, o in enumerate(outs)], allow_unused=True)

    with guarded():
        step()  # warm-up, outside the timing
        with saved_tensor_bytes() as saved:
            call_on(fn, parts, params)
        peak = None
        if device.type == "cuda":  # the CPU reports no tensor peak but through the profiler
            with step_peak(device) as peak:
                step()
        timed = benchmark.Timer("step()", globals={"step": step}).blocked_autorange(
            min_run_time=seconds)
    return {"median": timed.median, "iqr": timed.iqr, "saved": saved.bytes,
            "peak": peak and peak.bytes}


def cost(fn: Callable, ref: Callable, sample: Sample, names: list[str], against: str,
         seconds: float = 0.3) -> Finding:
    """The cost row: time, saved bytes and peak of fn against ref, ratios first."""
    mine, theirs = (measure(f, sample, names, seconds) for f in (fn, ref))

    def ratio(key: str) -> str:
        return f"{mine[key] / theirs[key]:.2f}×" if theirs[key] else "n/a"


    def both(key: str, unit: str) -> str:
        spread = (f" (IQR {_size(mine['iqr'], unit)})", f" (IQR {_size(theirs['iqr'], unit)})") \
            if key == "median" else ("", "")
        return f"{_size(mine[key], unit)}{spread[0]} vs {_size(theirs[key], unit)}{spread[1]}"

    peak = f"tensor peak {both('peak', 'B')}" if mine["peak"] is not None else \
        "no tensor peak on the cpu"
    peaks = f", {ratio('peak')} peak" if mine["peak"] is not None else ""
    return "measured", (f"{ratio('median')} time, {ratio('saved')} saved{peaks} of {against}'s on"
                        f" {sample[0]}: forward+backward {both('median', 's')} (median); saved "
                        f"for backward {both('saved', 'B')}; {peak}")
