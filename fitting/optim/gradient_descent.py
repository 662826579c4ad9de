"""The tutorial's update, p -= lr * p.grad, as an optimizer the training loop can step.

torch.optim.SGD(momentum=0) applies the same step as `p.add_(p.grad, alpha=-lr)`, which rounds
differently from the tutorial's multiply-then-subtract: parameters that should stay at zero
(poly3's a and c) drift to other values of order 1e-10. This class rounds as the tutorial does,
so `python train.py` reproduces the tutorial's numbers exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class GradientDescent:
    """Plain gradient descent over one group of parameters, with torch.optim's interface
    (`step(closure)`, `zero_grad`, `param_groups`, `state_dict`/`load_state_dict`)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float) -> None:
        params = list(params)
        if not params:
            raise ValueError("GradientDescent: got an empty parameter list")
        if not lr > 0:
            raise ValueError(f"GradientDescent: lr must be > 0, got {lr}")
        self.param_groups: list[dict[str, Any]] = [{"params": params, "lr": lr}]
        self.state: dict[torch.Tensor, dict[str, Any]] = {}  # none: kept for torch.optim's API

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (or zero them in place with `set_to_none=False`)."""
        for p in self.param_groups[0]["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """Evaluate `closure` (loss and gradients) if given, then p -= lr * p.grad for each
        parameter that has a gradient; return the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        group = self.param_groups[0]
        with torch.no_grad():
            for p in group["params"]:
                if p.grad is not None:
                    p -= group["lr"] * p.grad
        return loss

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: no per-parameter state, one group with its lr."""
        n = len(self.param_groups[0]["params"])
        return {"state": {}, "param_groups": [{"lr": self.param_groups[0]["lr"],
                                               "params": list(range(n))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the lr of a state_dict() of an optimizer over as many parameters."""
        groups = state_dict["param_groups"]
        n = len(self.param_groups[0]["params"])
        if len(groups) != 1 or len(groups[0]["params"]) != n:
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(
                f"GradientDescent: the state_dict has parameter groups of sizes {sizes}, "
                f"this optimizer one group of {n}"
            )
        self.param_groups[0]["lr"] = groups[0]["lr"]
