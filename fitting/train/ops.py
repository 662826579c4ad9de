"""The run's choice of function for each op (`ops.<op>=custom|builtin|<module>:<name>`): resolved
and checked before anything is written, applied to the task's model, and logged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fitting.tasks import TASKS
from fitting.train.validate import ConfigError
from models.ops.choice import OPS, OpSpecError, ResolvedOp, check_op, resolve_op

BUILTIN_SPECS = ("custom", "builtin")


def resolve_ops(
    cfg_ops: Any, device: torch.device, dtype: torch.dtype
) -> dict[str, ResolvedOp]:
    """Each op's function as `cfg_ops` names it; a user's (`<module>:<name>`) is imported and
    called once on a reference input in `dtype` on `device`. ConfigError (one line naming the
    key) if one does not import or does not run as its op."""
    out = {}
    for op in OPS:
        spec = str(getattr(cfg_ops, op))
        try:
            resolved = resolve_op(op, spec)
            if spec not in BUILTIN_SPECS:
                check_op(op, resolved.fn, spec, dtype, device)
        except OpSpecError as err:
            raise ConfigError(str(err)) from None
        out[op] = resolved
    return out


def swaps(
    ops: dict[str, ResolvedOp], impl: str, task: str
) -> dict[str, Callable[..., torch.Tensor]]:
    """The functions of task `task`'s ops chosen otherwise than `impl` (its model is built with
    `impl`; fitting.tasks.build_task swaps these in)."""
    return {op: ops[op].fn for op in TASKS[task].ops if ops[op].spec != impl}


def user_op_lines(ops: dict[str, ResolvedOp], task: str) -> list[str]:
    """One log line per user op: its spec, source file and the file's sha256 (to reproduce the
    run), and whether the task uses it."""
    lines = []
    for op, resolved in ops.items():
        if resolved.spec in BUILTIN_SPECS:
            continue
        unused = "" if op in TASKS[task].ops else f" (not used by task={task})"
        lines.append(f"{resolved.key}: source {resolved.source}, sha256 {resolved.sha256}{unused}")
    return lines
