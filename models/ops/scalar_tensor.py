"""ScalarTensor: an N×N scaled identity that torch functions accept via __torch_function__."""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch

_HANDLED: dict[Callable, Callable] = {}


def _implements(*torch_fns: Callable) -> Callable:
    def register(fn: Callable) -> Callable:
        for torch_fn in torch_fns:
            _HANDLED[torch_fn] = fn
        return fn

    return register


class ScalarTensor:
    """value · I_N stored as two numbers; torch functions work on it without densifying."""

    def __init__(self, N: int, value: float) -> None:
        if isinstance(N, bool) or not isinstance(N, int) or N < 1:
            raise ValueError(f"ScalarTensor: N must be a positive int, got {N!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Number):
            raise TypeError(f"ScalarTensor: value must be a number, got {type(value).__name__}")
        self._N = N
        self._value = value

    @property
    def shape(self) -> torch.Size:
        """(N, N), like the dense tensor."""
        return torch.Size((self._N, self._N))

    def __repr__(self) -> str:
        return f"ScalarTensor(N={self._N}, value={self._value})"

    def tensor(self, dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
        """The dense N×N tensor value · I."""
        return self._value * torch.eye(self._N, dtype=dtype, device=device)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _HANDLED.get(func)
        if handler is not None:
            result = handler(*args, **kwargs)
            if result is not NotImplemented:
                return result
        # Anything we don't handle specially runs on the dense equivalent.
        return func(*_densify(args), **_densify(kwargs))


def _densify(obj):
    """Replace every ScalarTensor inside args/kwargs by its dense tensor."""
    if isinstance(obj, ScalarTensor):
        return obj.tensor()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_densify(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _densify(v) for k, v in obj.items()}
    return obj


def _check_same_n(op: str, a: ScalarTensor, b: ScalarTensor) -> None:
    if a._N != b._N:
        raise ValueError(f"torch.{op}: ScalarTensor sizes differ: N={a._N} and N={b._N}")


@_implements(torch.mean)
def _mean(input: ScalarTensor, *args, **kwargs):
    if args or kwargs:
        return NotImplemented  # dim=/dtype= variants: use the dense path
    return torch.tensor(input._value / input._N)


@_implements(torch.diagonal)
def _diagonal(input: ScalarTensor, offset: int = 0, dim1: int = 0, dim2: int = 1):
    n = max(input._N - abs(offset), 0)
    return torch.full((n,), input._value if offset == 0 else 0.0)


@_implements(torch.add)
def _add(input, other, *, alpha=1, out=None):
    if out is None and isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        _check_same_n("add", input, other)
        return ScalarTensor(input._N, input._value + alpha * other._value)
    return NotImplemented


@_implements(torch.mul)
def _mul(input, other, *, out=None):
    if out is not None:
        return NotImplemented
    if isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        _check_same_n("mul", input, other)
        return ScalarTensor(input._N, input._value * other._value)
    s, o = (input, other) if isinstance(input, ScalarTensor) else (other, input)
    if isinstance(o, numbers.Number) and not isinstance(o, bool):
        return ScalarTensor(s._N, s._value * o)
    if isinstance(o, torch.Tensor) and tuple(o.shape) == (s._N, s._N):
        # Elementwise with value·I keeps only the diagonal of the dense operand.
        return torch.diag_embed(o.diagonal() * s._value)
    return NotImplemented


@_implements(torch.mm, torch.matmul)
def _matmul(input, other, *, out=None):
    if out is not None:
        return NotImplemented
    if isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        _check_same_n("matmul", input, other)
        return ScalarTensor(input._N, input._value * other._value)
    if isinstance(input, ScalarTensor) and isinstance(other, torch.Tensor):
        if other.dim() < 1 or other.shape[0 if other.dim() == 1 else -2] != input._N:
            raise ValueError(
                f"torch.matmul: ScalarTensor is {input._N}x{input._N} but the other operand has "
                f"shape {tuple(other.shape)}"
            )
        return input._value * other
    if isinstance(other, ScalarTensor) and isinstance(input, torch.Tensor):
        if input.dim() < 1 or input.shape[-1] != other._N:
            raise ValueError(
                f"torch.matmul: ScalarTensor is {other._N}x{other._N} but the other operand has "
                f"shape {tuple(input.shape)}"
            )
        return input * other._value
    return NotImplemented
