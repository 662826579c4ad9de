"""Benchmark the fused Conv2d+BatchNorm2d op against the built-in pair: time, saved bytes, peak.

Run it through `python -m fitting.bench --only conv_bn`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.benchmark import Timer

from fitting.bench.ops import row
from models.conv_bn import FusedConvBN2d
from models.ops.fused_conv_bn import fused_conv_bn2d
from models.ops.memory import saved_tensor_bytes

# The size: N=64, C 16→32, 32×32, 3×3, padding 1.
N, C_IN, C_OUT, HW, K = 64, 16, 32, 32, 3
CNN_BLOCKS = 4
ROUNDS = 5  # alternate custom/builtin so drift and other load hit both alike
TARGET_OP = "time <= 1.3x, bytes <= 0.4x"


def _timed_ms(fn: Callable[[], object], min_run_time: float) -> list[float]:
    """Per-run milliseconds of fn, from torch.utils.benchmark's blocked_autorange."""
    m = Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time)
    return [t * 1e3 for t in m.times]


def _side_by_side(custom: Callable, builtin: Callable, rounds: int, min_run_time: float):
    """Per-block ms of custom and of builtin, measured in alternating rounds in one process."""
    times_c: list[float] = []
    times_b: list[float] = []
    for _ in range(rounds):
        times_c += _timed_ms(custom, min_run_time)
        times_b += _timed_ms(builtin, min_run_time)
    return times_c, times_b


def _saved_bytes(fn: Callable[[], torch.Tensor]) -> int:
    with saved_tensor_bytes() as saved:
        fn()
    return saved.bytes


def _peak_cuda_bytes(step: Callable[[], object], device: torch.device) -> int:
    """Peak CUDA bytes allocated by one step beyond what was allocated before it."""
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def _op_row(device: torch.device, rounds: int, min_run_time: float) -> dict:
    """One conv+BN layer in training mode: fwd+bwd time and saved-for-backward bytes."""
    g = torch.Generator(device="cpu").manual_seed(0)
    kw = {"device": device, "dtype": torch.float32}

    def leaf(*shape):
        return torch.randn(*shape, generator=g).to(**kw).requires_grad_()

    x, w = leaf(N, C_IN, HW, HW), leaf(C_OUT, C_IN, K, K)
    gamma, beta = leaf(C_OUT), leaf(C_OUT)
    mean, var = torch.zeros(C_OUT, **kw), torch.ones(C_OUT, **kw)
    grad = torch.randn(N, C_OUT, HW, HW, generator=g).to(**kw)
    inputs = (x, w, gamma, beta)

    def forward(impl):
        return lambda: fused_conv_bn2d(
            x, w, gamma, beta, mean, var, True, 0.1, 1e-5, 1, 1, 1, 1, impl
        )

    def step(impl):
        fwd = forward(impl)
        return lambda: torch.autograd.grad(fwd(), inputs, grad)

    t_c, t_b = _side_by_side(step("custom"), step("builtin"), rounds, min_run_time)
    b_c, b_b = _saved_bytes(forward("custom")), _saved_bytes(forward("builtin"))
    name = f"fused_conv_bn2d train fwd+bwd N={N} {C_IN}->{C_OUT} {HW}x{HW} {K}x{K}"
    return row(name, t_c, t_b, b_c, b_b, TARGET_OP)


def _cnn(impl: str, device: torch.device) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(CNN_BLOCKS):
        layers += [
            FusedConvBN2d(C_IN if i == 0 else C_OUT, C_OUT, K, padding=1, impl=impl),
            nn.ReLU(),
        ]
    return nn.Sequential(*layers).to(device)


def _cnn_row(device: torch.device, rounds: int, min_run_time: float) -> dict:
    """A CNN of conv-BN-ReLU blocks: fwd+bwd time, and peak memory (CUDA) or saved bytes (CPU)."""
    models = {impl: _cnn(impl, device) for impl in ("custom", "builtin")}
    x = torch.randn(N, C_IN, HW, HW, device=device, requires_grad=True)

    def step(impl):
        model = models[impl]
        return lambda: model(x).sum().backward()

    t_c, t_b = _side_by_side(step("custom"), step("builtin"), rounds, min_run_time)
    name = f"CNN {CNN_BLOCKS}x(conv-BN-ReLU) fwd+bwd N={N} {HW}x{HW}"
    if device.type == "cuda":
        for impl in models:
            step(impl)()  # warm-up: cuDNN workspaces and gradient buffers exist before measuring
        b_c, b_b = (_peak_cuda_bytes(step(impl), device) for impl in ("custom", "builtin"))
        return row(name + " (bytes: CUDA peak)", t_c, t_b, b_c, b_b, "peak <= 0.6x")
    b_c, b_b = (_saved_bytes(lambda m=models[impl]: m(x)) for impl in ("custom", "builtin"))
    return row(name + " (bytes: saved)", t_c, t_b, b_c, b_b, "(informative; peak target is CUDA)")


def bench_fused_conv_bn(device: torch.device | str, quick: bool = False) -> list[dict]:
    """Rows (custom vs built-in pair) for one conv+BN layer and for a CNN of such blocks."""
    device = torch.device(device)
    rounds, t = (2, 0.2) if quick else (ROUNDS, 0.5)
    return [_op_row(device, rounds, t), _cnn_row(device, max(1, rounds // 2), t)]
