"""Base class of the ops: torch.autograd.Function with a cheaper positional `apply`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from torch._functorch.utils import unwrap_dead_wrappers


class Function(torch.autograd.Function):
    """An autograd.Function whose `apply(*tensors_and_values)` skips signature binding.

    `torch.autograd.Function.apply` binds every call's arguments with `inspect.signature` when
    `setup_context` is defined; measured here that costs ~15 us a call, as much as the whole
    forward+backward of a 2000-element op. Our functional aliases always pass every argument
    positionally, so nothing needs binding; keyword calls and functorch transforms take the
    standard path unchanged.
    """

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        if (
            kwargs
            or torch.compiler.is_compiling()
            or torch._C._are_functorch_transforms_active()
        ):
            return super().apply(*args, **kwargs)
        # Same as the standard path: tensors left over from a finished torch.func transform
        # are unwrapped before they reach autograd.
        if any(isinstance(a, torch.Tensor) and is_functorch_wrapped(a) for a in args):
            args = unwrap_dead_wrappers(args)
        # The C++ apply calls forward(*args) then setup_context(ctx, args, output) itself.
        return super(torch.autograd.Function, cls).apply(*args)


def forward_ad_active() -> bool:
    """True when forward-mode AD may ask a Function for its jvp (dual level or torch.func)."""
    # save_for_forward keeps tensors alive for the life of the graph node; only pay for that
    # when a jvp can actually be requested.
    return fwAD._current_level >= 0 or torch._C._are_functorch_transforms_active()


def is_functorch_wrapped(t: torch.Tensor) -> bool:
    """True for a tensor wrapped by vmap/grad transforms, where in-place ops may be refused."""
    # gradcheck's batched-grad check still uses the legacy vmap, whose tensors are not
    # functorch wrappers.
    return torch._C._functorch.is_functorch_wrapped_tensor(
        t
    ) or torch._C._functorch.is_legacy_batchedtensor(t)


def without_jvp(cls: type[Function]) -> type[Function]:
    """A subclass of `cls` minus its `jvp`, the variant used while torch.compile traces."""
    # Dynamo refuses any autograd.Function that defines jvp ("Unsupported custom jvp"), and
    # compiled graphs never ask for one; eager forward-mode AD keeps using `cls`.
    return type(f"{cls.__name__}NoJvp", (cls,), {"jvp": torch.autograd.Function.jvp})


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
        error = torch._C._functions.DelayedError(message.encode(), len(outs) + len(sources))
        # Outputs that require grad so the error node is their grad_fn; values unchanged.
        fakes = [None if o is None else o.detach().requires_grad_() for o in outs]
        linked = error(*fakes, *sources)[: len(outs)]
        return tuple(linked) if isinstance(outputs, tuple) else linked[0]

    return wrapper
