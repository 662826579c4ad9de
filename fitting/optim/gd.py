"""The tutorial's update, p -= lr * p.grad, as a torch.optim.Optimizer.

torch.optim.SGD applies `p.add_(p.grad, alpha=-lr)`, which rounds differently from the
tutorial's multiply-then-subtract: poly3's a and c, which should stay at 0, drift to ~1e-10.
GD rounds as the tutorial does, so `python train.py` reproduces the tutorial's numbers exactly.
"""

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor


class GD(torch.optim.Optimizer):
    """Plain gradient descent, rounded as the tutorial rounds."""

    def __init__(self, params: Iterable[Any], lr: float) -> None:
        if not lr > 0:
            raise ValueError(f"optimizer.lr must be > 0, got {lr!r}")
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """Evaluate `closure` (loss and gradients) if given, then p -= lr * p.grad."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p -= group["lr"] * p.grad
        return loss
