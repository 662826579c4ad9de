"""The app as a plain function, `run(cfg, out_dir) -> final loss` (train.py calls it; tests
call it without Hydra): check the config, choose the ops, build the task and its optimizer,
start or resume, train, report."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fitting.optim import OPTIMIZERS
from fitting.tasks import TASKS, build_task
from fitting.track.tb_logging import TBLogger
from fitting.train import report
from fitting.train.checkpoint import Checkpointer, plain_config, restore
from fitting.train.checkpoint import load as load_checkpoint
from fitting.train.lock import run_dir_lock
from fitting.train.loop import RunState, log_figure, train
from fitting.train.ops import model_ops, resolve_ops, user_op_lines
from fitting.train.parallel import job_threads
from fitting.train.profile import step_profiler
from fitting.train.resume import check_resumable
from fitting.train.signals import (
    Diverged,
    Interrupted,
    NonFiniteStep,
    SecondSignal,
    StoppedAtOnce,
    WriteFailed,
)
from fitting.train.validate import CHECKPOINT, ConfigError, validate

if TYPE_CHECKING:
    from fitting.config import Config

log = logging.getLogger(__name__)

# The run's final numbers at full precision (the closing lines print 6 digits).
RESULTS = "results.json"


def run(cfg: Config, out_dir: str | Path) -> float:
    """Train as `cfg` (a config composed from conf/) says, writing the TensorBoard run, figures
    and checkpoint.pt to `out_dir`; return the last step's loss (as the tutorial prints it).

    A config error raises ConfigError before anything is written. With `cfg.resume` (a run
    dir, which must be `out_dir`) the run continues from its checkpoint. A run stopped by a
    signal or a non-finite loss raises RunStopped (Interrupted, Diverged) after saving."""
    validate(cfg)
    out = Path(out_dir).resolve()
    device, dtype = resolve_device(cfg.device.value), getattr(torch, cfg.dtype.value)
    ops = resolve_ops(cfg, TASKS[cfg.task.name].slots, device, dtype)
    saved = _resume_payload(cfg, out) if cfg.resume else None
    option = OPTIMIZERS[cfg.optimizer.name]
    with ExitStack() as stack:
        stack.enter_context(torch_threads(job_threads(cfg.threads)))
        stack.enter_context(deterministic(cfg.deterministic, device))
        torch.manual_seed(cfg.seed)  # model initialization; data use their own seeded generator
        task = _build_task(cfg, ops, device, dtype)
        optimizer = option.build(cfg.optimizer, task.model, task)
        state = RunState() if saved is None else restore(saved, task, optimizer)
        out.mkdir(parents=True, exist_ok=True)
        stack.enter_context(run_dir_lock(out))
        log.info("%s", report.start_line(cfg, task.name, ops, device))
        for line in user_op_lines(ops):
            log.info("%s", line)
        if saved is not None:
            log.info("resuming after step %d of %d from %s", state.step, cfg.steps,
                     out / CHECKPOINT)
        forward = torch.compile(task.model) if cfg.compile else task.model
        ckpt = Checkpointer(out, cfg.ckpt.every, plain_config(cfg), task, optimizer)
        ckpt.saved_step = None if saved is None else state.step
        try:
            # purge_step: TensorBoard drops what the run logged after its checkpoint, before
            # it stopped, so no step appears twice.
            purge = None if saved is None else state.step
            with (TBLogger(out, purge_step=purge, task=task.name) as tb,
                  step_profiler(cfg.profile, out, device) as prof):
                state = _train(cfg, task, optimizer, tb, ckpt, state, forward, prof)
                figure = log_figure(tb, task, state.step)
                summary = task.summary(task.model)
                tb.hparams(report.hparams(cfg, task.name, ops, device))
            ckpt.save(state, "converged" if state.converged else "completed")
            write_results(out / RESULTS, report.results(state, summary))
        except OSError as err:
            raise WriteFailed(err, ckpt.saved_step, str(ckpt.path)) from err
    for line in report.closing_lines(cfg, task, state, summary, figure):
        log.info("%s", line)
    for line in report.where_lines(ckpt.path, out):
        log.info("%s", line)
    return state.loss


def _train(cfg: Config, task: Any, optimizer: Any, tb: TBLogger, ckpt: Checkpointer,
           state: RunState, forward: Any, after_step: Any) -> RunState:
    """`train`, then what ends the run early: a signal (saved, Interrupted) or a non-finite
    step (saved as it was before that step, Diverged); else the final validation."""
    try:
        state, signal = train(cfg, task, optimizer, tb, ckpt, state, forward, after_step)
    except SecondSignal as err:
        raise StoppedAtOnce(err.signum, ckpt.saved_step, str(ckpt.path)) from None
    except NonFiniteStep as err:
        tb.flush()
        ckpt.save(state, "diverged")
        message = err.describe(state.step, state.loss, task)
        if cfg.on_nonfinite.value == "raise":
            raise FloatingPointError(message) from err
        raise Diverged(message, state.step) from None
    if signal is not None and not state.converged and state.step < cfg.steps:
        tb.flush()
        ckpt.save(state, "interrupted")
        raise Interrupted(signal, state.step, cfg.steps, str(ckpt.path.parent))
    if task.has_validation:
        state.val_loss = task.validate(task.model)
        tb.scalars(state.step, {"loss/val": state.val_loss})
    return state


def write_results(path: Path, results: dict[str, Any]) -> None:
    """`results` as JSON in `path`, written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(path)


def _build_task(cfg: Config, ops: dict, device: torch.device, dtype: torch.dtype) -> Any:
    """build_task, with running out of memory for the data as a config error naming task.*."""
    try:
        return build_task(cfg.task, model_ops(ops), device, dtype, cfg.seed)
    except (MemoryError, RuntimeError) as err:
        if not isinstance(err, MemoryError) and "memory" not in str(err).lower():
            raise
        sizes = ", ".join(f"task.{k}={v}" for k, v in cfg.task.items()
                          if isinstance(v, int) and not isinstance(v, bool))
        raise ConfigError(
            f"task={cfg.task.name}: its data and model do not fit in memory on {device} "
            f"({type(err).__name__}); use smaller sizes ({sizes})"
        ) from None


def resolve_device(name: str) -> torch.device:
    """'auto' is cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
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


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Use `threads` CPU threads inside the block (0: torch's default), then restore."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _resume_payload(cfg: Config, out: Path) -> dict[str, Any]:
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
