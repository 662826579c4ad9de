"""Helpers about ops: a Function torch.compile can trace; what a wrapped op calls."""

import functools
from collections.abc import Callable
from typing import Any

import torch


def compilable(cls: type[torch.autograd.Function]) -> Callable[..., torch.Tensor]:
    """`cls.apply`, except that under torch.compile it applies `cls` minus its `jvp`."""
    # Dynamo refuses an autograd.Function that defines jvp ("Unsupported custom jvp") and
    # compiled graphs never ask for one; eager forward-mode AD keeps using `cls`.
    traced = type(cls.__name__, (cls,), {"jvp": torch.autograd.Function.jvp})

    def apply(*args):
        return (traced if torch.compiler.is_compiling() else cls).apply(*args)

    return apply


def unwrap(fn: Callable) -> tuple[Callable, dict[str, Any]]:
    """What `fn` calls under its partials (a Function's `.apply`: its class) and their keywords."""
    kwargs: dict[str, Any] = {}
    while isinstance(fn, functools.partial):
        fn, kwargs = fn.func, {**fn.keywords, **kwargs}
    owner = getattr(fn, "__self__", None)  # Function.apply is bound to the Function's class
    function = isinstance(owner, type) and issubclass(owner, torch.autograd.Function)
    return (owner if function else fn), kwargs
