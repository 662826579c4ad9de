"""What newton and lm share as options: damped second-order steps on the task's residuals, for
models of few parameters (an n×n matrix) whose residuals are a pure function of the parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fitting.checks import Checker, ConfigError
from fitting.optim.spec import StepStats

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fitting.tasks import Task


def check(cfg: Any, c: Checker) -> None:
    """The keys newton and lm share: tries, the parameter limit, chunks and the rounding level."""
    c.at_least("max_tries", cfg.max_tries, 1)
    c.at_least("max_params", cfg.max_params, 1)
    if cfg.chunk_size is not None:
        c.at_least("chunk_size", cfg.chunk_size, 1)
    if cfg.ftol is not None:
        c.at_least("ftol", cfg.ftol, 0.0, "(or null)")


def check_model(name: str, model: nn.Module, task: Task) -> None:
    """ConfigError for a model whose residuals are not a pure function of its parameters
    (state updated in training, e.g. batch-norm statistics)."""
    buffers = [buffer for buffer, _ in model.named_buffers()]
    if buffers:
        raise ConfigError(
            f"optimizer={name} needs residuals that are a pure function of the parameters, "
            f"but the {task.name} model updates state in training (buffer {buffers[0]}, e.g. "
            "batch-norm statistics); use optimizer=lbfgs or adam for this model"
        )


def no_batch_yet(name: str) -> Any:
    """The residual_fn an optimizer starts with: the loop sets that of each batch (prepare)."""

    def residual_fn(params: Any) -> Any:
        raise RuntimeError(
            f"optimizer={name}: no batch yet; set optimizer.residual_fn = "
            "residual_fn_from_model(model, task.residuals, batch) before each step (fit does)"
        )

    return residual_fn


def prepare(optimizer: torch.optim.Optimizer, task: Task, batch: Any) -> None:
    """Newton and LM differentiate the residuals of this step's batch."""
    from fitting.optim.second_order import residual_fn_from_model

    optimizer.residual_fn = residual_fn_from_model(task.model, task.residuals, batch)


def describe(cfg: Any) -> str:
    """The start-up line's optimizer part: damping, not a learning rate, sets the step."""
    return f"{cfg.name} damping={cfg.damping:g} max_params={cfg.max_params}"


def damping_scalars(optimizer: torch.optim.Optimizer, stats: StepStats) -> dict[str, float]:
    """The damping of the accepted step and its length relative to the parameters'."""
    return {
        "optim/damping": optimizer.last_stats["damping"],
        "optim/rel_step": optimizer.last_stats["rel_step"],
    }
