"""Which function runs each app op: ours (`custom`), PyTorch's twin (`builtin`) or a user's.

A spec is `custom`, `builtin` or `<module>:<name>`, optionally with keyword arguments as
Python literals, `<module>:<name>(kw=value, ...)`; the module importable from the current
directory or PYTHONPATH and the name a `torch.autograd.Function` subclass (called through
`.apply`) or a plain function, taking the op's positional arguments (`OpEntry.signature`).
`resolve_op` imports it and `check_op` calls it the way the models do; anything wrong is an
`OpSpecError` whose one-line message names the key (`ops.activation=mymod:myrelu`).
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .precheck import CHECK_TIMEOUT, NEEDS, check_op, op_entry
from .slots import CONV_BN_SIGNATURE, OPS, OpEntry
from .spec import SPEC_HELP, OpSpecError, load_callable, split_spec

__all__ = [
    "CHECK_TIMEOUT", "CONV_BN_SIGNATURE", "NEEDS", "OPS", "SPEC_HELP", "OpEntry", "OpSpecError",
    "ResolvedOp", "check_op", "op_entry", "resolve_callable", "resolve_op",
]  # fmt: skip


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


def resolve_op(op: str, spec: str) -> ResolvedOp:
    """The callable `spec` names for `op` (custom, builtin or <module>:<name>[(kw=value, ...)])."""
    entry = op_entry(op)
    if spec in ("custom", "builtin"):
        return ResolvedOp(op, spec, getattr(entry, spec))
    return resolve_callable(op, spec, f"ops.{op}=my_ops:my_{op}")


def resolve_callable(op: str, spec: str, example: str) -> ResolvedOp:
    """A `<module>:<name>[(kw=value, ...)]` spec for `op` (any name, slot or not)."""
    key = f"ops.{op}={spec}"
    module_name, name, kwargs = split_spec(key, spec, example)
    fn, obj, module = load_callable(key, module_name, name, kwargs)
    source = _source_file(obj, module)
    return ResolvedOp(op, spec, fn, source, _sha256(source))


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
