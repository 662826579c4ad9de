"""What an optimizer option (optimizer=<name>) is: its schema, range checks and builder, and the
stop settings every optimizer has."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fitting.tasks import Task

# The largest n of the n×n Hessian (newton) or JᵀJ (lm) the second-order optimizers take by
# default: 4353 parameters (the default mlp) took ~2 s a step.
MAX_PARAMS = 1000


@dataclass
class StopConfig:
    """Stop before `steps` once the fit has converged: `patience` consecutive steps changed the
    loss by no more than `rtol`·|loss|. `steps` stays the budget; patience=0 runs every step."""

    patience: int = 0
    rtol: float | None = None  # None: 4 eps of the dtype, i.e. no change beyond rounding


def describe_lr(cfg: Any) -> str:
    """The start-up line's optimizer part: the name and its learning rate."""
    return f"{cfg.name} lr={cfg.lr:g}"


@dataclass(frozen=True)
class OptimizerOption:
    """optimizer=<name>: `schema` is its config dataclass (every schema has `name`, `lr` and
    `stop`; its defaults are the option's defaults), `check(cfg, checker)` adds its out-of-range
    values (lr and stop are checked for all), `build(cfg, model, task)` makes the optimizer.
    `takes_lr` False: a set optimizer.lr is a config error, and lr is not among the hparams.

    The training loop only calls `optimizer.step(closure)`: an optimizer with special needs
    (a line search, second-order steps) meets them inside its own step. One that has numbers
    of its own to log keeps them in `optimizer.last_stats` (logged as optim/<key>)."""

    name: str
    schema: type
    takes_lr: bool
    check: Callable[[Any, Checker], None]
    build: Callable[[Any, nn.Module, Task], torch.optim.Optimizer]
    describe: Callable[[Any], str] = describe_lr
