"""The app as a plain function: `run(cfg, out_dir) -> final loss`, callable without Hydra."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from fitting.optim.build import build_optimizer
from fitting.tasks import build_task
from fitting.track.tb_logging import TBLogger
from fitting.train.checkpoint import Checkpointer, check_resumable, plain_config, restore
from fitting.train.checkpoint import load as load_checkpoint
from fitting.train.loop import FitResult, fit
from fitting.train.parallel import job_threads
from fitting.train.validate import CHECKPOINT, ConfigError, validate

log = logging.getLogger(__name__)


def run(cfg: DictConfig, out_dir: str | Path) -> float:
    """Train as `cfg` says, writing the TensorBoard run, figures and checkpoint.pt to `out_dir`;
    return the final training loss (that of the last step, as the tutorial prints it).

    Out-of-range values raise ConfigError before anything is built. With `cfg.resume` (a run
    dir, which must be `out_dir`) the run continues from its checkpoint. A run stopped by a
    signal or a non-finite loss raises RunStopped (Interrupted, Diverged) after saving."""
    validate(cfg)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    saved = _resume_payload(cfg, out) if cfg.resume else None
    impl, device, dtype = _value(cfg.impl), resolve_device(_value(cfg.device)), _dtype(cfg)
    with torch_threads(job_threads(cfg.threads)), deterministic(cfg.deterministic, device):
        torch.manual_seed(cfg.seed)  # model initialization; data use their own seeded generator
        task = build_task(cfg.task, impl, device, dtype, cfg.seed)
        optimizer = build_optimizer(cfg.optimizer, task.model, task)
        state = None if saved is None else restore(saved, task, optimizer)
        log.info(
            "task=%s impl=%s optimizer=%s steps=%d seed=%d device=%s dtype=%s%s",
            task.name, impl, describe_optimizer(cfg.optimizer), cfg.steps, cfg.seed, device,
            _value(cfg.dtype), " compile=true" if cfg.compile else "",
        )
        if state is not None:
            log.info("resuming after step %d of %d from %s", state.step, cfg.steps,
                     out / CHECKPOINT)
        forward = compiled(task.model) if cfg.compile else task.model
        ckpt = Checkpointer(out, cfg.ckpt.every, plain_config(cfg), task, optimizer)
        # purge_step: TensorBoard drops what the run logged after its checkpoint, before it
        # stopped, so no step appears twice.
        with TBLogger(out, purge_step=None if state is None else state.step) as tb:
            result = fit(
                task, optimizer, cfg.steps, cfg.log, tb, out, cfg.optimizer.stop, forward,
                ckpt=ckpt, state=state, on_nonfinite=_value(cfg.on_nonfinite),
            )
            summary = task.summary(task.model)
            tb.hparams(
                hparams(cfg, task.name, device), final_metrics(result, summary), result.steps
            )

    log.info("Result: %s", task.describe(task.model))
    val = "" if result.val_loss is None else f", val loss {result.val_loss:.6g}"
    log.info(
        "final loss %.6g%s after %d steps (%.2f s, median step %.3f ms, %d bytes saved for "
        "backward per step)", result.final_loss, val, result.steps, result.wall_s,
        result.step_ms_median, result.saved_bytes,
    )
    log.info("%s", convergence_line(result, summary, cfg.steps))
    log.info("final: %s", ", ".join(f"{k}={v:.6g}" for k, v in summary.items()))
    log.info("figure: %s", result.figures[-1])
    log.info("checkpoint: %s", ckpt.path)
    log.info("run dir: %s", out)
    log.info("view it: tensorboard --logdir %s", out)
    return result.final_loss


def describe_optimizer(cfg_optimizer: Any) -> str:
    """The optimizer and its main setting for the startup line: lr, or damping (no lr)."""
    name = cfg_optimizer.name
    if name in ("sgd", "adam"):
        return f"{name} lr={cfg_optimizer.lr:g}"
    if name == "lbfgs":
        return f"{name} (strong-Wolfe line search, max_eval={cfg_optimizer.max_eval})"
    return f"{name} damping={cfg_optimizer.damping:g} max_params={cfg_optimizer.max_params}"


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


def compiled(model: torch.nn.Module) -> torch.nn.Module:
    """`model` under torch.compile (inductor): the loop's forward passes run compiled code;
    the parameters stay those of `model`."""
    return torch.compile(model, backend="inductor")


def hparams(cfg: DictConfig, task: str, device: torch.device) -> dict[str, Any]:
    """The run's hyperparameters for TensorBoard's HParams tab (numbers and strings only).

    lr only for the optimizers that use one (lbfgs, newton and lm take none)."""
    out = {
        "task": task,
        "impl": _value(cfg.impl),
        "optimizer": cfg.optimizer.name,
        "lr": cfg.optimizer.lr,
        "steps": cfg.steps,
        "seed": cfg.seed,
        "device": str(device),
        "dtype": _value(cfg.dtype),
    }
    if cfg.optimizer.name not in ("sgd", "adam"):
        del out["lr"]
    if cfg.compile:
        out["compile"] = "true"
    return out


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
    }
    if result.val_loss is not None:
        metrics["final/val_loss"] = result.val_loss
    metrics.update({f"final/{key}": value for key, value in summary.items()})
    return metrics


def resolve_device(name: str) -> torch.device:
    """'auto' is cuda when available, else cpu; 'cuda' without CUDA is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available; use device=auto or device=cpu")
    return torch.device(name)


@contextmanager
def deterministic(on: bool, device: torch.device) -> Iterator[None]:
    """torch.use_deterministic_algorithms(True) inside the block when `on`, then as before.

    On CUDA cuBLAS also needs CUBLAS_WORKSPACE_CONFIG, set (unless already) before its first
    use; CPU runs are repeatable without any of this."""
    if not on:
        yield
        return
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def _resume_payload(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """The checkpoint to resume from, checked against `cfg` (ConfigError if it does not fit)."""
    run_dir = Path(cfg.resume).expanduser().resolve()
    if run_dir != out:
        raise ConfigError(
            f"resume={cfg.resume} continues that run in its own dir, but the output dir is "
            f"{out}; leave hydra.run.dir out when resuming"
        )
    payload = load_checkpoint(run_dir)
    check_resumable(payload, cfg, run_dir)
    return payload


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Use `threads` CPU threads inside the block (0: torch's default), then restore."""
    if threads < 0:
        raise ValueError(f"threads must be >= 0 (0 = torch's default), got {threads}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _dtype(cfg: DictConfig) -> torch.dtype:
    """The torch dtype named by cfg.dtype (float32 or float64)."""
    return {"float32": torch.float32, "float64": torch.float64}[_value(cfg.dtype)]


def _value(option: Enum | str) -> str:
    """An enum option's string (plain strings pass through, e.g. from a hand-made config)."""
    return option.value if isinstance(option, Enum) else option
