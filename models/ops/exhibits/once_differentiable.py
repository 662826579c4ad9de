"""`once_differentiable` for a hand-written backward, with public autograd APIs only."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


class _RaiseInBackward(torch.autograd.Function):
    """Passes its first `n` tensors through; differentiating through it raises `message`."""

    @staticmethod
    def forward(ctx, message: str, n: int, *tensors: torch.Tensor | None) -> tuple:
        ctx.message = message
        return tuple(tensors[:n])

    @staticmethod
    def backward(ctx, *grads: Any) -> Any:
        raise RuntimeError(ctx.message)


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """Like torch's `once_differentiable`: runs `backward` without recording a graph and makes a
    double backward through it raise, also when it reaches the op through a saved input."""

    @functools.wraps(backward)
    def wrapper(ctx: Any, *grads: Any) -> Any:
        with torch.no_grad():
            outputs = backward(ctx, *grads)
        if not torch.is_grad_enabled():
            return outputs
        # torch's decorator links its error node to the incoming gradients only, so d(x.grad)/dx
        # after backward(create_graph=True) from a constant gradient came out silently wrong (the
        # node never ran). Linking the saved inputs too puts the error on every path.
        sources = [
            t
            for t in (*grads, *ctx.saved_tensors)
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        if not sources:
            return outputs
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        message = (
            f"{type(ctx).__name__}: this backward is once_differentiable (it runs outside "
            "autograd), so it cannot be differentiated again; use a double-differentiable op"
        )
        # Outputs that require grad so the error node is their grad_fn; values unchanged.
        fakes = [None if o is None else o.detach().requires_grad_() for o in outs]
        linked = _RaiseInBackward.apply(message, len(outs), *fakes, *sources)
        return tuple(linked) if isinstance(outputs, tuple) else linked[0]

    return wrapper
