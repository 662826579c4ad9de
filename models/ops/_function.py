"""What the ops' autograd Functions share: one compile-safe `apply`, and spotting transforms."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

_NO_JVP = torch.autograd.Function.jvp


def compile_safe_apply(cls: type[torch.autograd.Function]) -> Callable[..., Any]:
    """`cls.apply`, except that while torch.compile traces it applies `cls` minus its `jvp`."""
    # Function.apply binds every call's arguments to inspect.signature(cls.forward); computing
    # that signature is most of a small op's Python overhead (legendre_p3 at 2,000 elements
    # ~1.3x the eager expression without this, ~1.0x with it). inspect.signature returns a
    # function's `__signature__` when set, so compute it once.
    forward = cls.forward
    forward.__signature__ = inspect.signature(forward)
    if cls.jvp is _NO_JVP:
        return cls.apply
    # Dynamo refuses any autograd.Function that defines jvp ("Unsupported custom jvp"), and
    # compiled graphs never ask for one; eager forward-mode AD keeps using `cls`.
    traced = type(f"{cls.__name__}NoJvp", (cls,), {"jvp": _NO_JVP})

    # A closure, not a lookup on `cls` or in a dict: Dynamo traces neither for an
    # autograd.Function class, but it reads closure cells.
    def apply(*args: Any) -> Any:
        return (traced if torch.compiler.is_compiling() else cls).apply(*args)

    return apply


def is_transform_wrapper(t: torch.Tensor) -> bool:
    """True for a strided tensor wrapped by torch.func's vmap/grad/jvp or gradcheck's vmap."""
    # Those wrappers are the strided tensors without storage of their own: asking for it
    # raises NotImplementedError ("Cannot access storage of TensorWrapper/BatchedTensorImpl").
    try:
        t.untyped_storage()
    except NotImplementedError:
        return True
    return False
