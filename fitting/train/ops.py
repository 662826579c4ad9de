"""The run's op choices, made once: each op slot of the task resolved to the function its
model is built with (`ops.<slot>=custom|builtin|<module>:<name>` or Hydra's
`{_target_: ..., _partial_: true, ...}`), a user's op checked before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from fitting.checks import ConfigError
from models.ops._checks import IMPLS
from models.ops.choice import OpSpecError, ResolvedOp, check_op, resolve_op

# What each optimizer needs of every op beyond a forward and a backward.
OPTIMIZER_NEEDS = {"newton": ("double_backward",), "lm": ("forward_ad",)}


def spec_text(choice: Any) -> str:
    """An op choice as one short string: the spec itself, or a `_target_` node as
    `module.name(arg=value, ...)`."""
    if not isinstance(choice, DictConfig | dict):
        return str(choice)
    node = OmegaConf.to_container(choice) if isinstance(choice, DictConfig) else dict(choice)
    target = str(node.pop("_target_", "?"))
    args = ", ".join(f"{k}={v!r}" for k, v in node.items() if not k.startswith("_"))
    return f"{target}({args})"


def resolve_ops(
    cfg: Any, slots: tuple[str, ...], device: torch.device, dtype: torch.dtype
) -> dict[str, ResolvedOp]:
    """Each of `slots` resolved as `cfg.ops` names it; a user's op is imported (or built from
    its `_target_`) and called once as the model calls it, in `dtype` on `device`, and must
    support what `cfg.optimizer` needs. ConfigError (one line naming the key) otherwise."""
    needs = OPTIMIZER_NEEDS.get(cfg.optimizer.name, ())
    out = {}
    for slot in slots:
        choice = cfg.ops[slot]
        try:
            resolved = _resolve(slot, choice)
            if resolved.spec not in IMPLS:
                check_op(slot, resolved.fn, resolved.spec, dtype, device, needs=needs)
        except OpSpecError as err:
            raise ConfigError(str(err)) from None
        out[slot] = resolved
    return out


def _resolve(slot: str, choice: Any) -> ResolvedOp:
    """A string spec through models.ops.choice; a `_target_` node through Hydra."""
    if not isinstance(choice, DictConfig):
        return resolve_op(slot, str(choice))
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    spec = spec_text(choice)
    if "_target_" not in choice:
        raise OpSpecError(f"ops.{slot}={spec}: a dict needs _target_ (and _partial_: true)")
    try:
        fn: Callable[..., torch.Tensor] = instantiate(choice)
    except InstantiationException as err:
        message = " ".join(str(err).split())
        raise OpSpecError(f"ops.{slot}={spec}: {message}") from None
    if not callable(fn) or isinstance(fn, torch.Tensor):
        raise OpSpecError(
            f"ops.{slot}={spec}: built a {type(fn).__name__}, not a function; "
            "add _partial_: true to pass the arguments to a function"
        )
    return ResolvedOp(slot, spec, fn)


def model_ops(ops: dict[str, ResolvedOp]) -> dict[str, Callable[..., torch.Tensor]]:
    """{slot: the function the model runs}: ours, the twin or the user's."""
    return {slot: r.fn for slot, r in ops.items()}


def user_op_lines(ops: dict[str, ResolvedOp]) -> list[str]:
    """One log line per user op: its spec, source file and the file's sha256 (to reproduce the
    run)."""
    return [
        f"{r.key}: source {r.source}, sha256 {r.sha256}"
        for r in ops.values() if r.spec not in IMPLS
    ]
