"""`once_differentiable` for a hand-written backward, with public autograd APIs only."""

import functools
from collections.abc import Callable
from typing import Any

import torch


class _RaiseInBackward(torch.autograd.Function):
    """Passes its first `n` tensors through; differentiating through it raises."""

    @staticmethod
    def forward(ctx, name: str, n: int, *tensors: torch.Tensor) -> tuple:
        ctx.name = name
        return tuple(tensors[:n])

    @staticmethod
    def backward(ctx, *grads: Any) -> Any:
        raise RuntimeError(f"{ctx.name}: this backward is once_differentiable (it runs outside "
                           "autograd), so it cannot be differentiated again")


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """Like torch's: run `backward` without recording a graph, and make a double backward
    through it raise, also when it reaches the op through a saved input."""

    @functools.wraps(backward)
    def wrapper(ctx: Any, *grads: Any) -> Any:
        with torch.no_grad():
            outputs = backward(ctx, *grads)
        # torch's decorator links its error node to the incoming gradients only, so
        # d(x.grad)/dx from a constant gradient came out silently wrong (the node never ran).
        sources = [t for t in (*grads, *ctx.saved_tensors)
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if not torch.is_grad_enabled() or not sources:
            return outputs
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        # Copies that require grad, so the error node is their grad_fn; values unchanged.
        fakes = [None if o is None else o.detach().requires_grad_() for o in outs]
        linked = _RaiseInBackward.apply(type(ctx).__name__, len(outs), *fakes, *sources)
        return tuple(linked) if isinstance(outputs, tuple) else linked[0]

    return wrapper
