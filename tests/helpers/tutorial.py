"""The PyTorch tutorial's poly3 experiment written out as the tutorial writes it."""

from __future__ import annotations

import math

import torch

from models.ops import legendre_p3


def tutorial_fit(steps: int, impl: str = "custom", lr: float = 5e-6) -> dict[str, float]:
    """The tutorial's loop (float32, 2000 points of sin on [-π, π], a=0, b=-1, c=0, d=0.3,
    `p -= lr * p.grad` by hand): the last step's loss and the final a, b, c, d."""
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    a, b, c, d = (torch.tensor(v, requires_grad=True) for v in (0.0, -1.0, 0.0, 0.3))
    for _ in range(steps):
        loss = (a + b * legendre_p3(c + d * x, impl) - y).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            for p in (a, b, c, d):
                p -= lr * p.grad
                p.grad = None
    return {"loss": loss.item(), "a": a.item(), "b": b.item(), "c": c.item(), "d": d.item()}
