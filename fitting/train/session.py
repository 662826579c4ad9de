"""One run of the app with a valid config: build the task and its optimizer, start or resume,
fit, report. fitting.train.run.run validates the config, then calls `train`."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fitting.optim import OPTIMIZERS
from fitting.tasks import build_task
from fitting.track.tb_logging import TBLogger
from fitting.train.checkpoint import Checkpointer, plain_config, restore
from fitting.train.checkpoint import load as load_checkpoint
from fitting.train.loop import Parts, fit
from fitting.train.ops import resolve_ops, swaps, user_op_lines
from fitting.train.parallel import job_threads
from fitting.train.profile import step_profiler
from fitting.train.report import closing_lines, final_metrics, hparams, start_line, where_lines
from fitting.train.resume import check_resumable
from fitting.train.validate import CHECKPOINT, ConfigError

if TYPE_CHECKING:
    from fitting.config import Config

log = logging.getLogger(__name__)


def train(cfg: Config, out: Path) -> float:
    """Train as `cfg` (a config fitting.train.validate accepted) says, writing the TensorBoard
    run, figures and checkpoint.pt to the dir `out`; return the last step's loss."""
    device, dtype = resolve_device(cfg.device.value), getattr(torch, cfg.dtype.value)
    ops = resolve_ops(cfg.ops, device, dtype)  # a user op that fails stops here, nothing written
    out.mkdir(parents=True, exist_ok=True)
    saved = _resume_payload(cfg, out) if cfg.resume else None
    spec = OPTIMIZERS[cfg.optimizer.name]
    with torch_threads(job_threads(cfg.threads)), deterministic(cfg.deterministic, device):
        torch.manual_seed(cfg.seed)  # model initialization; data use their own seeded generator
        chosen = swaps(ops, cfg.impl.value, cfg.task.name)
        task = build_task(cfg.task, cfg.impl.value, device, dtype, cfg.seed, chosen)
        optimizer = spec.build(cfg.optimizer, task.model, task)
        state = None if saved is None else restore(saved, task, optimizer)
        log.info("%s", start_line(cfg, task.name, device))
        for line in user_op_lines(ops, task.name):
            log.info("%s", line)
        if state is not None:
            log.info("resuming after step %d of %d from %s", state.step, cfg.steps,
                     out / CHECKPOINT)
        forward = compiled(task.model) if cfg.compile else task.model
        ckpt = Checkpointer(out, cfg.ckpt.every, plain_config(cfg), task, optimizer)
        # purge_step: TensorBoard drops what the run logged after its checkpoint, before it
        # stopped, so no step appears twice.
        with (
            TBLogger(out, purge_step=None if state is None else state.step) as tb,
            step_profiler(cfg.profile, out, device) as after_step,
        ):
            parts = Parts(task, optimizer, spec, tb, out, forward, ckpt, after_step)
            result = fit(parts, cfg, state)
            summary = task.summary(task.model)
            metrics = final_metrics(result, summary)
            tb.hparams(hparams(cfg, task.name, device), metrics, result.steps)
    lines = closing_lines(result, summary, cfg.steps, task.describe(task.model))
    for line in lines + where_lines(ckpt.path, out):
        log.info("%s", line)
    return result.final_loss


def compiled(model: torch.nn.Module) -> torch.nn.Module:
    """`model` under torch.compile (inductor): the loop's forward passes run compiled code;
    the parameters stay those of `model`."""
    return torch.compile(model, backend="inductor")


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
