"""Time and saved-bytes of each custom op against its built-in twin (fwd+bwd, medians)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from models.ops import legendre_p3, linear, relu, saved_tensor_bytes

ROUNDS = 3  # alternate custom/builtin measurements so drift hits both sides alike
ROWS, FEATURES = 1024, 512  # relu's input and linear's x (ROWS x FEATURES) @ FEATURES²
P3_SIZE = 1_000_000


def fwd_bwd_ms(fn: Callable, inputs: list[torch.Tensor], min_run_time: float) -> float:
    """Median milliseconds of one forward+backward of fn(*inputs)."""
    grad = torch.ones_like(fn(*inputs))
    timer = Timer("fn(*inputs).backward(grad)", globals={"fn": fn, "inputs": inputs, "grad": grad})
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def saved_bytes(fn: Callable, inputs: list[torch.Tensor]) -> int:
    """Bytes fn(*inputs) saves for backward."""
    with saved_tensor_bytes() as saved:
        fn(*inputs)
    return saved.bytes


def compare(
    name: str,
    custom: Callable,
    builtin: Callable,
    inputs: list[torch.Tensor],
    target: str,
    min_run_time: float = 0.3,
) -> dict:
    """One table row: custom vs builtin time (side by side, alternating) and saved bytes."""
    if inputs[0].is_cuda:
        torch.cuda.synchronize()
    times_c, times_b = [], []
    for _ in range(ROUNDS):
        times_c.append(fwd_bwd_ms(custom, inputs, min_run_time))
        times_b.append(fwd_bwd_ms(builtin, inputs, min_run_time))
    t_c, t_b = statistics.median(times_c), statistics.median(times_b)
    b_c, b_b = saved_bytes(custom, inputs), saved_bytes(builtin, inputs)
    return row(name, t_c, t_b, b_c, b_b, target)


def row(name: str, t_c: float, t_b: float, b_c: int, b_b: int, target: str) -> dict:
    """A benchmark table row: custom/builtin times (ms), saved bytes, their ratios, target."""
    return {
        "name": name,
        "custom_ms": t_c,
        "builtin_ms": t_b,
        "time_ratio": t_c / t_b,
        "custom_bytes": b_c,
        "builtin_bytes": b_b,
        "bytes_ratio": b_c / b_b if b_b else float("nan"),
        "target": target,
    }


def _eager_p3(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (5 * x**3 - 3 * x)


def bench_ops(device: torch.device, quick: bool = False) -> list[dict]:
    """Rows for linear, relu and legendre_p3 at the sizes the targets name, plus small sizes."""
    t = 0.1 if quick else 0.3
    kw = {"device": device, "dtype": torch.float32}
    x = torch.randn(ROWS, FEATURES, **kw, requires_grad=True)
    w = torch.randn(FEATURES, FEATURES, **kw, requires_grad=True)
    b = torch.randn(FEATURES, **kw, requires_grad=True)
    rows = [
        compare("linear 1024x512 @ 512x512", linear, F.linear, [x, w, b], "time <= 1.05x", t),
        compare("relu 1024x512", relu, F.relu, [x], "time <= 1.6x, bytes <= 0.25x", t),
    ]
    for n in (2_000, P3_SIZE):
        p = torch.randn(n, **kw, requires_grad=True)
        rows.append(
            compare(f"legendre_p3 {n:,} vs eager", legendre_p3, _eager_p3, [p], "time <= 1.0x", t)
        )
    # Per-call Python overhead: at 16 elements the kernels cost ~nothing.
    small = torch.randn(4, 4, **kw, requires_grad=True)
    sw = torch.randn(4, 4, **kw, requires_grad=True)
    rows += [
        compare("overhead: linear 4x4", linear, F.linear, [small, sw], "(informative)", t),
        compare("overhead: relu 16", relu, F.relu, [small], "(informative)", t),
        compare("overhead: legendre_p3 16", legendre_p3, _eager_p3, [small], "(informative)", t),
    ]
    return rows
