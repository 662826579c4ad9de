"""ScalarTensor: an N×N scaled identity that torch functions accept via __torch_function__."""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch

_HANDLED: dict[Callable, Callable] = {}
_INT64 = (-(2**63), 2**63)


class DimensionError(ValueError, IndexError):
    """A dim out of range: a ValueError, and an IndexError like aten's (cf. numpy's AxisError)."""


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
        # The dense twin is value * torch.eye(N): only Python numbers that torch can scale by.
        if isinstance(value, bool) or not isinstance(value, (int, float, complex)):
            raise TypeError(
                f"ScalarTensor: value must be a Python int, float or complex, got "
                f"{type(value).__name__}; convert it first, e.g. float(value)"
            )
        if isinstance(value, int) and not _INT64[0] <= value < _INT64[1]:
            raise ValueError(f"ScalarTensor: int value {value:.3e} does not fit in int64")
        self._N = N
        self._value = value

    @property
    def shape(self) -> torch.Size:
        """(N, N), like the dense tensor."""
        return torch.Size((self._N, self._N))

    @property
    def dtype(self) -> torch.dtype:
        """The dense tensor's dtype: the default float dtype (complex for a complex value)."""
        return self._entries().dtype

    def __repr__(self) -> str:
        return f"ScalarTensor(N={self._N}, value={self._value})"

    def tensor(self, dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
        """The dense N×N tensor value · I."""
        return self._value * torch.eye(self._N, dtype=dtype, device=device)

    def _entries(self) -> torch.Tensor:
        """[diagonal, off-diagonal] entries of the dense tensor, rounded and signed like it."""
        return self._value * torch.tensor([1.0, 0.0])

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


def _check_same_n(fn: str, a: ScalarTensor, b: ScalarTensor) -> None:
    if a._N != b._N:
        raise ValueError(f"{fn}: ScalarTensor sizes differ: N={a._N} and N={b._N}")


def _dim(fn: str, name: str, dim: object) -> int:
    """A dim of a 2-D tensor, negative dims counted from the end."""
    d = operator.index(dim)  # torch's argument parser already refused non-ints
    if not -2 <= d <= 1:
        raise DimensionError(
            f"{fn}: {name}={d} is out of range for a 2-D ScalarTensor; use 0, 1, -1 or -2"
        )
    return d % 2


@_implements(torch.mean)
def _mean(input: ScalarTensor, *args, **kwargs):
    if args or kwargs:
        return NotImplemented  # dim=/dtype= variants: use the dense path
    return torch.tensor(input._value / input._N)


@_implements(torch.diagonal)
def _diagonal(input, offset=0, dim1=0, dim2=1, **kwargs):
    if kwargs or not isinstance(input, ScalarTensor):
        return NotImplemented
    offset = operator.index(offset)
    d1, d2 = _dim("torch.diagonal", "dim1", dim1), _dim("torch.diagonal", "dim2", dim2)
    if d1 == d2:
        raise ValueError(
            f"torch.diagonal: dim1={dim1} and dim2={dim2} are the same dim of a 2-D ScalarTensor; "
            "pass two different dims"
        )
    # value·I is symmetric, so swapping dim1 and dim2 gives the same diagonal.
    entry = input._entries()[0 if offset == 0 else 1]
    return entry.repeat(max(input._N - abs(offset), 0))


@_implements(torch.add)
def _add(input, other, *, alpha=1, out=None):
    if out is None and isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        _check_same_n("torch.add", input, other)
        return ScalarTensor(input._N, input._value + alpha * other._value)
    return NotImplemented


@_implements(torch.mul)
def _mul(input, other, *, out=None):
    if out is not None:
        return NotImplemented
    if isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        _check_same_n("torch.mul", input, other)
        return ScalarTensor(input._N, input._value * other._value)
    s, o = (input, other) if isinstance(input, ScalarTensor) else (other, input)
    if isinstance(o, (int, float, complex)) and not isinstance(o, bool):
        return ScalarTensor(s._N, s._value * o)
    if isinstance(o, torch.Tensor) and tuple(o.shape) == (s._N, s._N):
        # Elementwise with value·I: the diagonal scaled, and 0·o off it (nan at inf/nan, ±0).
        entries = s._entries().to(torch.promote_types(s.dtype, o.dtype))
        o = o.to(entries.dtype)
        result = o * entries[1]
        result.diagonal().copy_(o.diagonal() * entries[0])
        return result
    return NotImplemented


def _matrix_product(fn: str, input, other):
    """input @ other for mm (2-D only) or matmul (1-D and batched too), one a ScalarTensor."""
    if isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        _check_same_n(fn, input, other)
        return ScalarTensor(input._N, input._value * other._value)
    left = isinstance(input, ScalarTensor)
    s, t = (input, other) if left else (other, input)
    if not isinstance(t, torch.Tensor):
        return NotImplemented  # the dense op raises its own TypeError
    if fn == "torch.mm" and t.dim() != 2:
        raise ValueError(
            f"{fn}: both operands must be 2-D matrices, got a ScalarTensor and a {t.dim()}-D "
            f"tensor of shape {tuple(t.shape)}; use torch.matmul for vectors and batches"
        )
    if t.dim() == 0:
        raise ValueError(f"{fn}: both operands must be at least 1-D, got a 0-D tensor")
    # ScalarTensor @ t contracts t's rows (dim 0 of a vector), t @ ScalarTensor its last dim.
    inner = -1 if not left or t.dim() == 1 else -2
    if t.shape[inner] != s._N:
        raise ValueError(
            f"{fn}: ScalarTensor is {s._N}x{s._N} but the other operand has shape "
            f"{tuple(t.shape)}; its dim {inner} must have size {s._N}"
        )
    if t.dtype != s.dtype:
        raise TypeError(
            f"{fn}: ScalarTensor has dtype {s.dtype} but the other operand has {t.dtype}; "
            f"cast it first, e.g. other.to({s.dtype})"
        )
    return t * s._entries()[0]


@_implements(torch.mm)
def _mm(input, mat2, *, out=None):
    return NotImplemented if out is not None else _matrix_product("torch.mm", input, mat2)


@_implements(torch.matmul)
def _matmul(input, other, *, out=None):
    return NotImplemented if out is not None else _matrix_product("torch.matmul", input, other)
