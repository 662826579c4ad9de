"""One helper the ops' autograd Functions share so torch.compile can trace them."""

from collections.abc import Callable

import torch


def compilable(cls: type[torch.autograd.Function]) -> Callable[..., torch.Tensor]:
    """`cls.apply`, except that under torch.compile it applies `cls` minus its `jvp`."""
    # Dynamo refuses an autograd.Function that defines jvp ("Unsupported custom jvp") and
    # compiled graphs never ask for one; eager forward-mode AD keeps using `cls`.
    traced = type(cls.__name__, (cls,), {"jvp": torch.autograd.Function.jvp})

    def apply(*args):
        return (traced if torch.compiler.is_compiling() else cls).apply(*args)

    return apply
