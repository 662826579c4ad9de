"""What an optimizer option is: its spec (schema, checks, builder, loop hooks), the stop settings
every optimizer has, and the record of one step the hooks read.

Torch is imported only by the builders and hooks: config.py registers the schemas and validate.py
runs the checks before torch loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fitting.tasks import Task


@dataclass
class StopConfig:
    """Stop before `steps` once the fit has converged: `patience` consecutive steps changed the
    loss by no more than `rtol`·|loss|. `steps` stays the budget; patience=0 runs every step."""

    patience: int = 0
    rtol: float | None = None  # None: 4 eps of the dtype, i.e. no change beyond rounding


@dataclass
class StepStats:
    """What the loop's closure saw during one optimizer step (it may run several times: lbfgs)."""

    # The loop logs this step: the closure counts the bytes its forward saves for backward
    # (`saved_bytes`, else 0) and the finiteness check computes ‖∇loss‖ (`grad_norm`).
    logged: bool = False
    evals: int = 0
    saved_bytes: int = 0
    grad_norm: float | None = None
    # The gradients of the first evaluation, at the parameters the step started from (in the
    # order of the optimizer's parameters).
    first_grads: list[torch.Tensor | None] = field(default_factory=list)


def no_hook(*args: Any) -> None:
    """A hook with nothing to do."""


def no_scalars(optimizer: torch.optim.Optimizer, stats: StepStats) -> dict[str, float]:
    """No scalars beyond those the loop logs for every optimizer."""
    return {}


def describe_lr(cfg: Any) -> str:
    """The start-up line's optimizer part: the name and its learning rate."""
    return f"{cfg.name} lr={cfg.lr:g}"


@dataclass(frozen=True)
class OptimizerSpec:
    """optimizer=<name>: everything the app knows about one optimizer.

    `schema` is its config dataclass (conf/optimizer/<name>.yaml fills it; every schema has
    `name`, `lr` and `stop`); `check(cfg, checker)` adds its out-of-range values (lr and stop are
    checked for all); `build(cfg, model, task)` makes the torch optimizer. `takes_lr` False: a
    set optimizer.lr is a config error, and lr is not among the run's hparams.

    The loop calls the hooks around each `optimizer.step(closure)`: `prepare_batch(optimizer,
    task, batch)` before it, `after_step(optimizer, stats)` right after it, and adds
    `extra_scalars(optimizer, stats)` to the step's logged scalars.
    """

    name: str
    schema: type
    takes_lr: bool
    check: Callable[[Any, Checker], None]
    build: Callable[[Any, nn.Module, Task], torch.optim.Optimizer]
    describe: Callable[[Any], str] = describe_lr
    prepare_batch: Callable[[torch.optim.Optimizer, Task, Any], None] = no_hook
    after_step: Callable[[torch.optim.Optimizer, StepStats], None] = no_hook
    extra_scalars: Callable[[torch.optim.Optimizer, StepStats], dict[str, float]] = no_scalars
