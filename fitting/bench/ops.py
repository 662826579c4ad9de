"""Time and saved-bytes of each custom op against its built-in twin (fwd+bwd, medians)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from fitting.bench.report import quantiles
from fitting.opcheck.memory import op_in_model, task_saved_bytes
from fitting.opcheck.trial_models import OP_TASK, TASKS, build, describe, loss
from models.ops import legendre_p3, linear, relu, relu_masked, saved_tensor_bytes
from models.ops.choice import OPS

ROUNDS = 3  # alternate custom/builtin measurements so drift hits both sides alike
ROWS, FEATURES = 1024, 512  # relu's input and linear's x (ROWS x FEATURES) @ FEATURES²
P3_SIZE = 1_000_000


def fwd_bwd_ms(fn: Callable, inputs: list[torch.Tensor], min_run_time: float) -> list[float]:
    """Milliseconds of one forward+backward of fn(*inputs), one per measured block."""
    grad = torch.ones_like(fn(*inputs))
    timer = Timer("fn(*inputs).backward(grad)", globals={"fn": fn, "inputs": inputs, "grad": grad})
    return [t * 1e3 for t in timer.blocked_autorange(min_run_time=min_run_time).times]


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
    times_c: list[float] = []
    times_b: list[float] = []
    for _ in range(ROUNDS):
        times_c += fwd_bwd_ms(custom, inputs, min_run_time)
        times_b += fwd_bwd_ms(builtin, inputs, min_run_time)
    b_c, b_b = saved_bytes(custom, inputs), saved_bytes(builtin, inputs)
    return row(name, times_c, times_b, b_c, b_b, target)


def bytes_ratio(b_c: int, b_b: int) -> float:
    """custom / builtin saved bytes (1 when both save nothing, inf when only custom saves)."""
    return b_c / b_b if b_b else (1.0 if b_c == 0 else float("inf"))


def row(
    name: str, times_c: list[float], times_b: list[float], b_c: int, b_b: int, target: str
) -> dict:
    """A benchmark table row: custom/builtin median times (ms) with their 20th/80th
    percentiles, saved bytes, their ratios, target. `name` is "op size" (size after the
    first space)."""
    (t_c, c20, c80), (t_b, b20, b80) = quantiles(times_c), quantiles(times_b)
    return {
        "name": name,
        "custom_ms": t_c,
        "builtin_ms": t_b,
        "time_ratio": t_c / t_b,
        "custom_bytes": b_c,
        "builtin_bytes": b_b,
        "bytes_ratio": bytes_ratio(b_c, b_b),
        "target": target,
        "custom_p20_ms": c20,
        "custom_p80_ms": c80,
        "builtin_p20_ms": b20,
        "builtin_p80_ms": b80,
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
        compare("relu 1024x512 (saves its output)", relu, F.relu, [x], "time <= 1.6x", t),
        compare(
            "relu_masked 1024x512 (saves a 1-byte mask)", relu_masked, F.relu, [x],
            "time <= 1.6x, bytes <= 0.25x", t,
        ),  # fmt: skip
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
    return rows + bench_in_models(device, t, quick)


def _model_row(name: str, task_name: str, models: list, batch: list, t: float, target: str,
               bytes_: tuple[int, int]) -> dict:  # fmt: skip
    """A row of two models' saved bytes and the time of one training forward+backward each."""
    task = TASKS[task_name]
    steps = [lambda x, y, m=m: loss(task, m, (x, y)) for m in models]
    r = compare(f"{name}, {describe(task, batch)}", *steps, batch, target, t)
    b_c, b_b = bytes_
    return {**r, "custom_bytes": b_c, "builtin_bytes": b_b, "bytes_ratio": bytes_ratio(b_c, b_b)}


def bench_in_models(device: torch.device, t: float, quick: bool = False) -> list[dict]:
    """Rows for the ops inside their task models: the bytes each op adds to the model's saved
    set (shared storages once) against its twin's, then each task model's total, all ops custom
    vs all builtin; times are one training forward+backward of the model."""
    rows = []
    variants = [(op, op, OPS[op].custom) for op in OPS]
    variants.insert(1, ("activation", "relu_masked", relu_masked))
    for op, label, fn in variants:
        task, twin = OP_TASK[op], OPS[op].builtin
        batch = list(TASKS[task].batch(device, quick))
        m = op_in_model(op, fn, twin, device, quick)
        models = [build(TASKS[task], "builtin", device, ops={op: f}) for f in (fn, twin)]
        name = f"{label} in {task} (bytes: added to the model)"
        rows.append(_model_row(name, task, models, batch, t, "(informative)",
                               (m.added, m.twin_added)))  # fmt: skip
    targets = {"poly3": "bytes <= 1.0x", "mlp": "bytes <= 1.0x", "cnn": "bytes < 0.74x"}
    for task, target in targets.items():
        batch = list(TASKS[task].batch(device, quick))
        saved = task_saved_bytes(task, device, quick)
        models = [build(TASKS[task], impl, device) for impl in ("custom", "builtin")]
        name = f"{task} model, all ops (bytes: saved)"
        rows.append(_model_row(name, task, models, batch, t, target,
                               (saved["custom"], saved["builtin"])))  # fmt: skip
    return rows
