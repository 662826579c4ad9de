"""What newton and lm share as options: damped second-order steps on the task's residuals, for
models of few parameters (an n×n matrix) whose residuals are a pure function of the parameters
on a fixed (full) batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fitting.checks import Checker, ConfigError

if TYPE_CHECKING:
    from torch import nn

    from fitting.optim.second_order import ResidualFn
    from fitting.tasks import Task


def check(cfg: Any, c: Checker) -> None:
    """The keys newton and lm share: tries, the parameter limit, chunks and the rounding level."""
    c.at_least("max_tries", cfg.max_tries, 1)
    c.at_least("max_params", cfg.max_params, 1)
    if cfg.chunk_size is not None:
        c.at_least("chunk_size", cfg.chunk_size, 1)
    if cfg.ftol is not None:
        c.at_least("ftol", cfg.ftol, 0.0, "(or null)")


def task_residuals(name: str, model: nn.Module, task: Task, max_params: int) -> ResidualFn:
    """The residuals of the task's (full) batch as a pure function of the model's parameters;
    ConfigError for a model of more than `max_params` parameters (checked first: the model
    size rules the optimizer out whatever else), one that updates state in training
    (batch-norm statistics) or a task that draws a new minibatch each step."""
    from fitting.optim.second_order import check_size, residual_fn_from_model

    check_size(name, sum(p.numel() for p in model.parameters()), max_params)
    buffers = [buffer for buffer, _ in model.named_buffers()]
    if buffers:
        raise ConfigError(
            f"optimizer={name} needs residuals that are a pure function of the parameters, "
            f"but the {task.name} model updates state in training (buffer {buffers[0]}, e.g. "
            "batch-norm statistics); use optimizer=lbfgs or adam for this model"
        )
    if not task.full_batch:
        raise ConfigError(
            f"optimizer={name} needs the same (full) batch every step, but task={task.name} "
            "draws minibatches; use optimizer=lbfgs or adam for this task"
        )
    return residual_fn_from_model(model, task.residuals, task.batch(0))


def describe(cfg: Any) -> str:
    """The start-up line's optimizer part: damping, not a learning rate, sets the step."""
    return f"{cfg.name} damping={cfg.damping:g} max_params={cfg.max_params}"
