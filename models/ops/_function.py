"""Base class of the ops: torch.autograd.Function with a cheaper positional `apply`."""

from __future__ import annotations

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
