"""Which function runs each app op: ours (`custom`), PyTorch's twin (`builtin`) or a user's.

A spec is `custom`, `builtin` or `<module>:<name>`, the module importable from the current
directory or PYTHONPATH and the name a `torch.autograd.Function` subclass (called through
`.apply`) or a plain function, taking the op's positional arguments (`OpEntry.signature`).
`resolve_op` imports it and `check_op` calls it once on a small reference input; anything wrong
is an `OpSpecError` whose one-line message names the key (`ops.activation=mymod:myrelu`).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .fused_conv_bn import fused_conv_bn2d, fused_conv_bn2d_builtin
from .legendre import legendre_p3, legendre_p3_builtin
from .linear import linear
from .relu_output import relu

SPEC_HELP = "custom, builtin or <module>:<name>"


class OpSpecError(ValueError):
    """A spec that cannot run as its op; the message is one line naming the key."""


@dataclass(frozen=True)
class OpEntry:
    """One app op: our function, PyTorch's twin, and a maker of reference inputs."""

    custom: Callable[..., torch.Tensor]
    builtin: Callable[..., torch.Tensor]
    # inputs(size, dtype, device, requires_grad, seed) -> the op's positional arguments;
    # `size` scales the batch dimension, values stay away from kinks (relu's 0).
    inputs: Callable[..., tuple]
    signature: str
    differentiable: tuple[int, ...] = (0,)  # positions of the arguments gradients flow to


@dataclass(frozen=True)
class ResolvedOp:
    """A spec turned into a callable; user specs also carry their source file and its sha256."""

    op: str
    spec: str
    fn: Callable[..., torch.Tensor]
    source: str | None = None
    sha256: str | None = None

    @property
    def key(self) -> str:
        """`ops.<op>=<spec>`, how errors and logs name the choice."""
        return f"ops.{self.op}={self.spec}"


def _leaf(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    return t.requires_grad_(requires_grad)


def _away_from_zero(shape, dtype, device, g) -> torch.Tensor:
    t = torch.randn(*shape, generator=g, dtype=torch.float64)
    return (t + 0.1 * t.sign()).to(device, dtype)


def _unary_inputs(size=4, dtype=torch.float32, device="cpu", requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (_leaf(_away_from_zero((size, 8), dtype, device, g), requires_grad),)


def _linear_inputs(size=4, dtype=torch.float32, device="cpu", requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((size, 8), (5, 8), (5,))
    return tuple(_leaf(_away_from_zero(s, dtype, device, g), requires_grad) for s in shapes)


def _conv_bn_inputs(size=4, dtype=torch.float32, device="cpu", requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = _away_from_zero((max(size // 2, 2), 3, 6, 6), dtype, device, g)
    w = _away_from_zero((4, 3, 3, 3), dtype, device, g)
    gamma = 1 + 0.1 * _away_from_zero((4,), dtype, device, g)
    beta = _away_from_zero((4,), dtype, device, g)
    params = tuple(_leaf(t, requires_grad) for t in (x, w, gamma, beta))
    stats = (torch.zeros(4, dtype=dtype, device=device), torch.ones(4, dtype=dtype, device=device))
    # training, momentum, eps, stride, padding, dilation, groups: the cnn's settings.
    return (*params, *stats, True, 0.1, 1e-5, 1, 1, 1, 1)


CONV_BN_SIGNATURE = (
    "conv_bn(x, weight, bn_weight, bn_bias, running_mean, running_var, training, momentum, eps, "
    "stride, padding, dilation, groups)"
)
OPS: dict[str, OpEntry] = {
    "activation": OpEntry(relu, torch.relu, _unary_inputs, "activation(x)"),
    "linear": OpEntry(linear, F.linear, _linear_inputs, "linear(x, weight, bias)", (0, 1, 2)),
    "legendre_p3": OpEntry(legendre_p3, legendre_p3_builtin, _unary_inputs, "legendre_p3(x)"),
    "conv_bn": OpEntry(
        fused_conv_bn2d, fused_conv_bn2d_builtin, _conv_bn_inputs, CONV_BN_SIGNATURE, (0, 1, 2, 3)
    ),
}


def op_entry(op: str) -> OpEntry:
    """The OPS entry of `op`, or an OpSpecError listing the ops."""
    try:
        return OPS[op]
    except KeyError:
        raise OpSpecError(f"unknown op {op!r}; choose one of {sorted(OPS)}") from None


def resolve_op(op: str, spec: str) -> ResolvedOp:
    """The callable `spec` names for `op` (custom, builtin or <module>:<name>)."""
    entry = op_entry(op)
    if spec in ("custom", "builtin"):
        return ResolvedOp(op, spec, getattr(entry, spec))
    key = f"ops.{op}={spec}"
    module_name, sep, name = str(spec).partition(":")
    if not (sep and module_name and name) or ":" in name:
        raise OpSpecError(f"{key}: expected {SPEC_HELP}, e.g. ops.{op}=my_ops:my_{op}")
    module = _import(key, module_name)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            where = getattr(module, "__file__", module_name)
            raise OpSpecError(f"{key}: module {module_name!r} ({where}) has no {name!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        fn = obj.apply
    elif callable(obj):
        fn = obj
    else:
        raise OpSpecError(
            f"{key}: {name!r} is a {type(obj).__name__}, not callable; name a function or a "
            "torch.autograd.Function subclass"
        )
    source = _source_file(obj, module)
    return ResolvedOp(op, spec, fn, source, _sha256(source))


def _import(key: str, module_name: str):
    """Import `module_name` with the current directory on sys.path (train.py's sys.path[0] is
    the script's directory, not the directory the user runs from)."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise OpSpecError(
                f"{key}: no module named {missing!r} in the current directory ({cwd}) or on "
                "PYTHONPATH"
            ) from None
        raise OpSpecError(f"{key}: importing {module_name!r} failed: {_line(err)}") from None
    except Exception as err:  # a SyntaxError, or whatever the module raises at import
        raise OpSpecError(f"{key}: importing {module_name!r} failed: {_line(err)}") from None
    finally:
        if added:
            sys.path.remove(cwd)


def _line(err: BaseException) -> str:
    """`Type: message` on one line."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _source_file(obj: object, module) -> str | None:
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:  # a builtin, a partial, a torch.library op object
        path = None
    path = path or getattr(module, "__file__", None)
    return os.path.abspath(path) if path else None


def _sha256(path: str | None) -> str | None:
    if path is None or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_op(
    op: str,
    fn: Callable[..., torch.Tensor],
    spec: str = "custom",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    needs: tuple[str, ...] = (),
) -> None:
    """Call `fn` once as `op` on a small reference input (forward and backward); raise an
    OpSpecError if it fails or its output differs from the twin's in type, shape or dtype.
    `needs`: capabilities the run's optimizer needs ("double_backward", "forward_ad")."""
    entry, key = op_entry(op), f"ops.{op}={spec}"
    want = entry.builtin(*entry.inputs(4, dtype, device))
    args = entry.inputs(4, dtype, device, requires_grad=True)
    try:
        out = fn(*args)
    except TypeError as err:
        raise OpSpecError(
            f"{key}: wrong signature: calling it as {entry.signature} raised {_line(err)}"
        ) from None
    except Exception as err:
        raise OpSpecError(
            f"{key}: {entry.signature} on a reference input raised {_line(err)}"
        ) from None
    if not isinstance(out, torch.Tensor):
        raise OpSpecError(
            f"{key}: returned {type(out).__name__}, expected one tensor of shape "
            f"{tuple(want.shape)}"
        )
    if out.shape != want.shape or out.dtype != want.dtype:
        raise OpSpecError(
            f"{key}: wrong output: shape {tuple(out.shape)} {out.dtype}, expected "
            f"{tuple(want.shape)} {want.dtype} (the builtin's on the same input)"
        )
    if not out.requires_grad:
        raise OpSpecError(
            f"{key}: its output does not require grad for inputs that do, so nothing trains; "
            "compute it with torch ops or wrap it in a torch.autograd.Function"
        )
    try:
        out.backward(torch.ones_like(out))
    except Exception as err:
        raise OpSpecError(f"{key}: backward on a reference input raised {_line(err)}") from None
