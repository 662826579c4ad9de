"""The card's cost row: an op's forward+backward time (torch.utils.benchmark's median and IQR),
the bytes it saves for backward and a step's tensor peak, against its reference's, at the size
its model calls it."""

from collections.abc import Callable

import torch
from torch.utils import benchmark

from fitting.opcheck.boundary import guarded
from fitting.opcheck.verdict import Finding, Sample, call_on, incoming, leaves_of, parts_of
from fitting.track.memory import step_peak
from models.ops import saved_tensor_bytes


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
         seconds: float = 0.3, interpreted: bool = False) -> Finding:
    """The cost row: fn's figures against ref's, ratios first (no time ratio for an op under
    Triton's interpreter: its time is the interpreter's)."""
    a, b = (measure(f, sample, names, seconds) for f in (fn, ref))

    def ratio(key: str) -> str:
        return f"{a[key] / b[key]:.2f}×" if b[key] else "n/a"

    def kib(key: str) -> str:
        return f"{a[key] / 1024:.1f} KiB vs {b[key] / 1024:.1f} KiB"

    time = " vs ".join(f"{m['median'] * 1e6:.1f} µs (IQR {m['iqr'] * 1e6:.1f})" for m in (a, b))
    if interpreted:
        return "measured", (f"under Triton's interpreter, whose time is not the kernel's (no time "
                            f"ratio: run it on a GPU), on {sample[0]}: forward+backward median "
                            f"{time}; saved for backward {kib('saved')} ({ratio('saved')})")
    peak = f"tensor peak {kib('peak')} ({ratio('peak')})" if a["peak"] is not None else \
        "no tensor peak on the cpu"
    return "measured", (f"{ratio('median')} time, {ratio('saved')} saved of {against}'s, on "
                        f"{sample[0]}: forward+backward median {time}; saved for backward "
                        f"{kib('saved')}; {peak}")
