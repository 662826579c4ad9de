"""What a run reports: its start-up line, its closing lines, and its HParams and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fitting.optim import OPTIMIZERS
from fitting.tasks import TASKS
from fitting.track.memory import describe_memory, peak_rss_bytes

if TYPE_CHECKING:
    from fitting.config import Config
    from fitting.train.loop import FitResult


def start_line(cfg: Config, task: str, device: Any) -> str:
    """task, impl and the choice of each of the task's ops, the optimizer and its main setting,
    steps, seed, device, dtype (compile)."""
    optimizer = OPTIMIZERS[cfg.optimizer.name].describe(cfg.optimizer)
    ops = "".join(f" {key}={value}" for key, value in op_choices(cfg, task).items())
    return (
        f"task={task} impl={cfg.impl.value}{ops} optimizer={optimizer} steps={cfg.steps} "
        f"seed={cfg.seed} device={device} dtype={cfg.dtype.value}"
        + (" compile=true" if cfg.compile else "")
    )


def closing_lines(
    result: FitResult, summary: dict[str, float], budget: int, described: str
) -> list[str]:
    """The result, final loss and timing, convergence, peak memory, the task's final numbers
    and the figure (`described`: the fitted model in one line)."""
    val = "" if result.val_loss is None else f", val loss {result.val_loss:.6g}"
    return [
        f"Result: {described}",
        f"final loss {result.final_loss:.6g}{val} after {result.steps} steps "
        f"({result.wall_s:.2f} s, median step {result.step_ms_median:.3f} ms, "
        f"{result.saved_bytes} bytes saved for backward per step)",
        convergence_line(result, summary, budget),
        describe_memory(result.memory),
        "final: " + ", ".join(f"{k}={v:.6g}" for k, v in summary.items()),
        f"figure: {result.figures[-1]}",
    ]


def where_lines(checkpoint: Path, out: Path) -> list[str]:
    """Where the run's checkpoint, dir and TensorBoard command are."""
    return [f"checkpoint: {checkpoint}", f"run dir: {out}", f"view it: tensorboard --logdir {out}"]


def convergence_line(result: FitResult, summary: dict[str, float], budget: int) -> str:
    """How far the run got: why it stopped, ‖∇loss‖, the last step's relative change and, when
    the task knows its optimum (poly3), the relative gap to it."""
    if result.converged:
        why = f"stopped as converged after {result.steps} of {budget} steps"
    else:
        why = f"ran all {result.steps} steps"
    where = "at the final parameters" if result.end_loss is not None else "of the last batch"
    parts = [
        why,
        f"gradient norm {result.grad_norm:.3g} ({where})",
        f"the last step lowered the loss by {result.rel_change:.3g} (relative)",
    ]
    if "rel_gap" in summary:
        parts.append(
            f"loss {summary['rel_gap']:.3g} relative above the exact optimum "
            f"{summary['optimum_loss']:.12g} (evaluated in float64)"
        )
    return "convergence: " + "; ".join(parts)


def hparams(cfg: Config, task: str, device: Any) -> dict[str, Any]:
    """The run's hyperparameters for TensorBoard's HParams tab (numbers and strings only);
    lr only for the optimizers that take one."""
    out = {
        "task": task,
        "impl": cfg.impl.value,
        "optimizer": cfg.optimizer.name,
        "lr": cfg.optimizer.lr,
        "steps": cfg.steps,
        "seed": cfg.seed,
        "device": str(device),
        "dtype": cfg.dtype.value,
    }
    out.update(op_choices(cfg, task))
    if not OPTIMIZERS[cfg.optimizer.name].takes_lr:
        del out["lr"]
    if cfg.compile:
        out["compile"] = "true"
    return out


def op_choices(cfg: Config, task: str) -> dict[str, str]:
    """{'ops.<op>': spec} of the ops task `task` runs."""
    return {f"ops.{op}": str(getattr(cfg.ops, op)) for op in TASKS[task].ops}


def final_metrics(result: FitResult, summary: dict[str, float]) -> dict[str, float]:
    """The metrics shown next to the hparams: 'final/loss', 'final/val_loss', the run's end
    point (steps run, gradient norm, last relative change), the task's own."""
    metrics = {
        "final/loss": result.final_loss,
        "final/step_ms": result.step_ms_median,
        "final/saved_bytes": float(result.saved_bytes),
        "final/steps": float(result.steps),
        "final/grad_norm": result.grad_norm,
        "final/rel_change": result.rel_change,
        "final/peak_rss_bytes": float(peak_rss_bytes()),
    }
    if result.memory is not None and result.memory.peak_bytes is not None:
        metrics["final/peak_bytes"] = float(result.memory.peak_bytes)
    if result.val_loss is not None:
        metrics["final/val_loss"] = result.val_loss
    metrics.update({f"final/{key}": value for key, value in summary.items()})
    return metrics
