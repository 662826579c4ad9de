"""The PyTorch tutorial's poly3 experiment, written as the tutorial writes it."""

from __future__ import annotations

import math

import torch

from docs.examples.tutorial_ops import LegendrePolynomial3


def tutorial(steps: int, lr: float = 5e-6) -> dict[str, float]:
    """The tutorial's loop as the tutorial writes it: its last loss and a, b, c, d."""
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    a, b, c, d = (torch.full((), v, requires_grad=True) for v in (0.0, -1.0, 0.0, 0.3))
    for _ in range(steps):
        P3 = LegendrePolynomial3.apply
        y_pred = a + b * P3(c + d * x)
        loss = (y_pred - y).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            a -= lr * a.grad
            b -= lr * b.grad
            c -= lr * c.grad
            d -= lr * d.grad
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None
    return {"loss": loss.item(), "a": a.item(), "b": b.item(), "c": c.item(), "d": d.item()}
