"""What a run reports: its start-up line, its closing lines, and its HParams and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fitting.optim import OPTIMIZERS
from fitting.track.memory import human_bytes, peak_rss_bytes

if TYPE_CHECKING:
    from fitting.config import Config
    from fitting.train.loop import RunState
    from models.ops.choice import ResolvedOp


def start_line(cfg: Config, task: str, ops: dict[str, ResolvedOp], device: Any) -> str:
    """task, each of the task's op slots and its choice, the optimizer and its main setting,
    steps, seed, device, dtype (compile)."""
    optimizer = OPTIMIZERS[cfg.optimizer.name].describe(cfg.optimizer)
    chosen = "".join(f" ops.{slot}={r.spec}" for slot, r in ops.items())
    return (
        f"task={task}{chosen} optimizer={optimizer} steps={cfg.steps} seed={cfg.seed} "
        f"device={device} dtype={cfg.dtype.value}" + (" compile=true" if cfg.compile else "")
    )


def closing_lines(
    cfg: Config, task: Any, state: RunState, summary: dict[str, float], figure: Path
) -> list[str]:
    """The fitted model, the last step's loss and timing, convergence, peak memory, the task's
    final numbers and the figure."""
    val = "" if state.val_loss is None else f", validation loss {state.val_loss:.6g}"
    ms = sorted(state.step_ms)[len(state.step_ms) // 2] if state.step_ms else float("nan")
    return [
        f"Result: {task.describe(task.model)}",
        f"final loss {state.loss:.6g} (the last step's, before its update){val} after "
        f"{state.step} steps ({state.train_s:.2f} s of training, median step {ms:.3f} ms, "
        f"{state.saved_bytes} bytes saved for backward per step)",
        convergence_line(cfg, state, summary),
        f"memory: process peak RSS {human_bytes(peak_rss_bytes())}",
        "at the final parameters: " + ", ".join(f"{k}={v:.6g}" for k, v in summary.items()),
        f"figure: {figure}",
    ]


def where_lines(checkpoint: Path, out: Path) -> list[str]:
    """Where the run's checkpoint, dir and TensorBoard command are."""
    return [f"checkpoint: {checkpoint}", f"run dir: {out}", f"view it: tensorboard --logdir {out}"]


def convergence_line(cfg: Config, state: RunState, summary: dict[str, float]) -> str:
    """Why the run stopped, the last step's relative change and, when the task knows its
    optimum (poly3), the relative gap to it."""
    if state.converged:
        why = f"stopped as converged after {state.step} of {cfg.steps} steps"
    else:
        why = f"ran all {state.step} steps"
    parts = [why]
    if state.prev_loss is not None and state.prev_loss == state.prev_loss and state.prev_loss:
        change = (state.loss - state.prev_loss) / abs(state.prev_loss)
        verb = "lowered" if change <= 0 else "raised"
        parts.append(f"the last step {verb} the loss by {abs(change):.3g} (relative)")
    if "rel_gap" in summary:
        parts.append(
            f"loss {summary['rel_gap']:.3g} relative above the exact optimum "
            f"{summary['optimum_loss']:.12g} of this data ({cfg.dtype.value} points; "
            "evaluated in float64)"
        )
    return "convergence: " + "; ".join(parts)


def hparams(
    cfg: Config, task: str, ops: dict[str, ResolvedOp], device: Any
) -> dict[str, Any]:
    """The run's hyperparameters for TensorBoard's HParams tab: one column per op slot, and the
    rest of the run in one `run` column. TensorBoard shows 5 hparam columns by default; this
    keeps every op choice among them with the metric columns beside them in a 1600 px window."""
    out: dict[str, Any] = {f"ops.{slot}": r.spec for slot, r in ops.items()}
    lr = f" lr={cfg.optimizer.lr:g}" if OPTIMIZERS[cfg.optimizer.name].takes_lr else ""
    out["run"] = (f"{task} {cfg.optimizer.name}{lr} steps={cfg.steps} seed={cfg.seed} "
                  f"{cfg.dtype.value} {device}" + (" compile" if cfg.compile else ""))
    return out


def results(state: RunState, summary: dict[str, float]) -> dict[str, float | int | bool | None]:
    """What results.json holds, at full precision: the last loss, validation loss, steps run,
    whether the stop rule ended the run, training time, median step time, bytes saved for
    backward, peak RSS, and the task's own final numbers (at the final parameters)."""
    ms = sorted(state.step_ms)[len(state.step_ms) // 2] if state.step_ms else None
    return {
        "loss": state.loss,
        "val_loss": state.val_loss,
        "steps": state.step,
        "converged": state.converged,
        "train_s": state.train_s,
        "step_ms_median": ms,
        "saved_bytes": state.saved_bytes,
        "peak_rss_bytes": peak_rss_bytes(),
        **summary,
    }
