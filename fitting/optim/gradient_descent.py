"""Plain (momentum) gradient descent: torch.optim.SGD's update without torch.optim's import cost.

Constructing or stepping any torch.optim optimizer imports torch._dynamo (~1 s measured here),
which is most of the start-up of the app's default 2-second tutorial run. This class applies
exactly SGD's update (same ops, same order: results are bit-identical, see the tests) and keeps
the same state_dict layout, so checkpoints load into torch.optim.SGD and back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class GradientDescent:
    """p ← p − lr·d with d the gradient (plus weight decay, momentum, Nesterov) as in SGD."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"GradientDescent: lr must be > 0, got {lr}")
        if momentum < 0 or weight_decay < 0:
            raise ValueError(
                f"GradientDescent: momentum and weight_decay must be >= 0, "
                f"got {momentum} and {weight_decay}"
            )
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("GradientDescent: nesterov needs momentum > 0 and dampening = 0")
        self.params = list(params)
        if not self.params:
            raise ValueError("GradientDescent: got an empty parameter list")
        self.param_groups = [
            {
                "params": self.params,
                "lr": lr,
                "momentum": momentum,
                "dampening": dampening,
                "weight_decay": weight_decay,
                "nesterov": nesterov,
            }
        ]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (set them to None, or zero them in place)."""
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """Evaluate `closure` (loss and gradients) if given, then update; return its loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        group = self.param_groups[0]
        lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
        with torch.no_grad():
            for p in self.params:
                if p.grad is None:
                    continue
                d_p = p.grad
                if group["weight_decay"]:
                    d_p = d_p.add(p, alpha=group["weight_decay"])
                if momentum:
                    buf = self.state.setdefault(p, {}).get("momentum_buffer")
                    if buf is None:
                        buf = self.state[p]["momentum_buffer"] = torch.clone(d_p).detach()
                    else:
                        buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
                    d_p = d_p.add(buf, alpha=momentum) if group["nesterov"] else buf
                p.add_(d_p, alpha=-lr)
        return loss

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: {'state': {index: {...}}, 'param_groups': [{..., 'params'}]}."""
        index = {p: i for i, p in enumerate(self.params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {
            "state": {index[p]: dict(s) for p, s in self.state.items()},
            "param_groups": [dict(group, params=list(range(len(self.params))))],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what state_dict() returned (or torch.optim.SGD's state_dict)."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(
                f"GradientDescent: the state_dict is for {sum(len(g['params']) for g in groups)} "
                f"parameters in {len(groups)} group(s), this optimizer has {len(self.params)} in 1"
            )
        for key in ("lr", "momentum", "dampening", "weight_decay", "nesterov"):
            if key in groups[0]:
                self.param_groups[0][key] = groups[0][key]
        self.state = {
            self.params[int(i)]: {
                k: v.to(self.params[int(i)]) if torch.is_tensor(v) else v for k, v in s.items()
            }
            for i, s in state_dict["state"].items()
        }
