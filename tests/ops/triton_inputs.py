"""Samples and references for carding Triton ops with `python -m fitting.opcheck any`: our SwiGLU
(until the forecast's glu slot names its twin) and liger-kernel's."""

import torch
import torch.nn.functional as F


def _random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def linear_cross_entropy_samples() -> list:
    """x (32, 16), weight (10, 16), target (32,): the forecast's linear head and its loss."""
    target = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(2))
    return [((_random(32, 16), _random(10, 16, seed=1), target), {})]


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The fused op's reference: F.cross_entropy(F.linear(x, weight), target)."""
    return F.cross_entropy(F.linear(x, weight), target)


def rms_norm_samples() -> list:
    """x (4, 8), weight (8,), eps."""
    return [((_random(4, 8), _random(8, seed=1), 1e-6), {})]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) · weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def swiglu_samples() -> list:
    """a, b (8, 32): the gate and the value of a transformer's MLP."""
    return [((_random(8, 32), _random(8, 32, seed=1)), {})]


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) · b."""
    return F.silu(a) * b
