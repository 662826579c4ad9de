"""ScalarTensor: an N×N scaled identity that torch functions accept via __torch_function__."""

from collections.abc import Callable

import torch

HANDLED: dict[Callable, Callable] = {}


def implements(torch_fn: Callable) -> Callable:
    """Register the decorated function as ScalarTensor's version of `torch_fn`."""
    def register(fn: Callable) -> Callable:
        HANDLED[torch_fn] = fn
        return fn
    return register


class ScalarTensor:
    """value · I_N stored as two numbers; a few torch functions work on it without densifying,
    every other one on the dense tensor."""

    def __init__(self, N: int, value: float) -> None:
        self._N, self._value = N, value

    def __repr__(self) -> str:
        return f"ScalarTensor(N={self._N}, value={self._value})"

    def tensor(self) -> torch.Tensor:
        """The dense N×N tensor value · I."""
        return self._value * torch.eye(self._N)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in HANDLED and not kwargs:
            return HANDLED[func](*args)
        dense = [a.tensor() if isinstance(a, ScalarTensor) else a for a in args]
        return func(*dense, **kwargs)


@implements(torch.mean)
def mean(input: ScalarTensor) -> torch.Tensor:
    """The mean of value · I_N: value / N."""
    return torch.tensor(float(input._value) / input._N)


@implements(torch.add)
def add(input: ScalarTensor, other: ScalarTensor) -> ScalarTensor | torch.Tensor:
    """Two ScalarTensors of one size add as numbers; anything else densifies."""
    if isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor) and input._N == other._N:
        return ScalarTensor(input._N, input._value + other._value)
    return torch.add(*(a.tensor() if isinstance(a, ScalarTensor) else a for a in (input, other)))
