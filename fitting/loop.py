"""The training loop: `optimizer.step(closure)` each step, logging to TensorBoard as configured."""

from __future__ import annotations

import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.ops import saved_tensor_bytes

from .tasks import Task, squared_error
from .tb_logging import TBLogger, grad_norm, grad_scalars, param_scalars

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    """What a finished run reports: last step's loss (before its update, as the tutorial prints)
    and validation loss at the final parameters (None without a validation set)."""

    final_loss: float
    val_loss: float | None
    saved_bytes: int
    step_ms_median: float
    wall_s: float
    figures: list[Path] = field(default_factory=list)


def fit(
    task: Task,
    optimizer: torch.optim.Optimizer,
    steps: int,
    log_cfg: Any,
    tb: TBLogger,
    out_dir: Path,
) -> FitResult:
    """Run `steps` optimizer steps on `task.model`; log every `log_cfg.every` steps to `tb`."""
    _check_intervals(steps, log_cfg)
    model = task.model
    named = list(model.named_parameters())
    params = [p for _, p in named]
    every, hist_every, fig_every = log_cfg.every, log_cfg.hist_every, log_cfg.figure_every
    val_every = log_cfg.val_every if task.has_validation else 0
    console_every = log_cfg.console_every or max(1, steps // 10)
    step_ms: list[float] = []
    figures: list[Path] = []
    stats = {"saved_bytes": 0}
    val_loss = None
    warned = False
    model.train()
    start = time.perf_counter()

    with ExitStack() as stack:
        bar = stack.enter_context(progress_bar(steps)) if show_progress() else None
        for step in range(steps):
            batch = task.batch(step)
            logging_step = step % every == 0 or step == steps - 1
            if step > 0 and fig_every and step % fig_every == 0:
                figures.append(_figure(task, tb, step, out_dir))
            if val_every and step % val_every == 0:
                val_loss = task.validate(model)
                tb.scalars(step, {"loss/val": val_loss})
            # The parameters the step's loss is computed at, not those after its update.
            values = param_scalars(named) if logging_step else None

            t0 = time.perf_counter()
            loss = optimizer.step(make_closure(task, optimizer, batch, stats))
            ms = (time.perf_counter() - t0) * 1e3
            step_ms.append(ms)

            if values is not None:
                loss_value = loss.item()
                values["loss/train"] = loss_value
                values["optim/grad_norm"] = grad_norm(params)
                values["memory/saved_bytes"] = stats["saved_bytes"]
                values["time/step_ms"] = ms
                values.update(grad_scalars(named))
                tb.scalars(step, values)
                if bar is not None:
                    bar.set_postfix_str(f"loss={loss_value:.5g}", refresh=False)
            if hist_every and step % hist_every == 0:
                tb.histograms(step, named)
            if bar is not None:
                bar.update()
            if (step + 1) % console_every == 0:
                log.info("step %d/%d  loss %.6g", step + 1, steps, loss.item())
                if not (warned or math.isfinite(loss.item())):
                    log.warning("the loss is %s: try a smaller optimizer.lr", loss.item())
                    warned = True

    final_loss = loss.item()
    if task.has_validation:
        val_loss = task.validate(model)
        tb.scalars(steps, {"loss/val": val_loss})
    figures.append(_figure(task, tb, steps, out_dir))
    wall = time.perf_counter() - start
    return FitResult(
        final_loss, val_loss, stats["saved_bytes"], statistics.median(step_ms), wall, figures
    )


def make_closure(
    task: Task, optimizer: torch.optim.Optimizer, batch: Any, stats: dict[str, int]
) -> Callable[[], torch.Tensor]:
    """The standard closure (zero grads, forward, loss, backward, return the loss), which also
    records the bytes the forward saved for backward in `stats["saved_bytes"]`."""

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        with saved_tensor_bytes() as counter:
            loss = squared_error(task.residuals(task.model, batch), task.reduction)
        loss.backward()
        stats["saved_bytes"] = counter.bytes
        return loss

    return closure


def _figure(task: Task, tb: TBLogger, step: int, out_dir: Path) -> Path:
    """Make, log and save the task's figure of the fit at `step`."""
    path = out_dir / f"fit_step{step:06d}.png"
    tb.figure("fit", task.figure(task.model, step), step, path)
    return path


def _check_intervals(steps: int, log_cfg: Any) -> None:
    """Reject steps < 1 and negative or zero logging intervals with a clear message."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if log_cfg.every < 1:
        raise ValueError(f"log.every must be >= 1, got {log_cfg.every}")
    for key in ("hist_every", "figure_every", "val_every", "console_every"):
        if getattr(log_cfg, key) < 0:
            value = getattr(log_cfg, key)
            raise ValueError(f"log.{key} must be >= 0 (0 turns it off), got {value}")


def show_progress() -> bool:
    """A progress bar only on an interactive terminal: never in CI, logs or captured output."""
    return sys.stdout.isatty() and not os.environ.get("CI")


@contextmanager
def progress_bar(steps: int) -> Iterator[Any]:
    """A tqdm bar on stdout; console log lines are printed above it instead of through it."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm(), tqdm(total=steps, file=sys.stdout, unit="step") as bar:
        yield bar
