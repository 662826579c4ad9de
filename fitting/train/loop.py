"""The training loop, in the order a step runs: batch, forward and loss, backward, optimizer
step, logging, checkpoint, stop rule. `train` is the whole of it; fitting.train.run sets it up."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fitting.tasks import Task, squared_error
from fitting.track.memory import StepMemory
from fitting.track.tb_logging import TBLogger, grad_norm, grad_scalars, param_scalars
from fitting.train.profile import PROFILED_STEPS
from fitting.train.signals import NonFiniteStep, StopSignals
from models.ops import saved_tensor_bytes

if TYPE_CHECKING:
    from fitting.config import Config
    from fitting.train.checkpoint import Checkpointer

log = logging.getLogger(__name__)


@dataclass
class RunState:
    """Where a run stands after `step` steps; a checkpoint saves it (all but `step_ms`) and a
    resumed run continues from it."""

    step: int = 0
    loss: float = math.nan  # the last step's loss, at the parameters that step started from
    prev_loss: float | None = None  # the loss of the step before it
    quiet: int = 0  # consecutive steps that changed the loss by at most optimizer.stop.rtol
    converged: bool = False
    val_loss: float | None = None
    train_s: float = 0.0  # seconds of training, summed over every session of the run
    saved_bytes: int = 0  # bytes the forward saved for backward, at the last logged step
    step_ms: list[float] = field(default_factory=list)  # this session's step times

    def record(self, loss: float, ms: float, seconds: float, rtol: float, patience: int) -> None:
        """One more step done with `loss`; the stop rule: converged once `patience` steps in a
        row changed the loss by at most rtol·|loss|."""
        change = math.inf if math.isnan(self.loss) else abs(self.loss - loss)
        self.quiet = self.quiet + 1 if change <= rtol * abs(self.loss) else 0
        self.prev_loss, self.loss, self.step = self.loss, loss, self.step + 1
        self.converged = patience > 0 and self.quiet >= patience
        self.step_ms.append(ms)
        self.train_s += seconds


def train(
    cfg: Config,
    task: Task,
    optimizer: torch.optim.Optimizer,
    tb: TBLogger,
    ckpt: Checkpointer,
    state: RunState,
    forward: Callable[..., Any] | None = None,
    after_step: Callable[[], None] = lambda: None,
) -> tuple[RunState, int | None]:
    """Run the steps from `state.step` up to `cfg.steps`; return the state and the signal
    that stopped the run early (None if none did). Stops early, its step done, on
    SIGINT/SIGTERM/SIGHUP and once converged; raises NonFiniteStep (the step not applied) at a
    non-finite loss or gradient. `forward` is the model to compute the loss through (e.g.
    compiled); `after_step` is called after each step (e.g. the profiler's)."""
    model = task.model
    forward = model if forward is None else forward
    named = list(model.named_parameters())
    every, steps = cfg.log.every, cfg.steps
    patience, rtol = cfg.optimizer.stop.patience, cfg.optimizer.stop.rtol
    rtol = 4 * torch.finfo(named[0][1].dtype).eps if rtol is None else rtol
    console_every = cfg.log.console_every or max(1, steps // 10)
    # torch runs one profiler at a time: with profile=true, the tensor peak waits for its steps.
    memory = StepMemory(named[0][1].device, cfg.log.memory_every,
                        first=PROFILED_STEPS if cfg.profile else 1)
    model.train()
    with StopSignals() as signals:
        for step in range(state.step, steps):
            t0 = time.perf_counter()
            logged = step % every == 0 or step == steps - 1
            _evaluate(cfg, task, tb, state, step)
            # The parameters the step's loss is computed at, before the update; also when the
            # stop rule may end the run at this step.
            scalars = param_scalars(named) if logged or 0 < patience <= state.quiet + 1 else {}

            batch = task.batch(step)
            closure = Closure(task, forward, batch, optimizer, count_saved=logged)
            t_step = time.perf_counter()
            with memory.measure(step, logged):
                loss = optimizer.step(closure).item()
            ms = (time.perf_counter() - t_step) * 1e3  # the optimizer step alone

            state.record(loss, ms, time.perf_counter() - t0, rtol, patience)

            if logged or state.converged:
                scalars.update(_step_scalars(closure, optimizer, named, ms, state))
                scalars.update(memory.scalars(step))
                tb.scalars(step, scalars)
            if cfg.log.hist_every and step % cfg.log.hist_every == 0:
                tb.histograms(step, named)
            after_step()
            if state.step % console_every == 0 or state.converged:
                # The step as TensorBoard numbers it (from 0), and how many are done.
                log.info("step %d  loss %.6g  (%d/%d steps done)", step, loss, state.step, steps)
            if state.converged or signals.received or state.step == steps:
                break
            if ckpt.due(state.step):
                tb.flush()
                ckpt.save(state, "running")
    return state, signals.received


def _evaluate(cfg: Config, task: Task, tb: TBLogger, state: RunState, step: int) -> None:
    """The validation loss and the figure of the fit, when due at `step` (before its update)."""
    if task.has_validation and cfg.log.val_every and step % cfg.log.val_every == 0:
        state.val_loss = task.validate(task.model)
        tb.scalars(step, {"loss/val": state.val_loss})
    if step and cfg.log.figure_every and step % cfg.log.figure_every == 0:
        log_figure(tb, task, step)


def log_figure(tb: TBLogger, task: Task, step: int) -> Path:
    """Draw the task's figure of the fit at `step` into fit_step<step>.png and log it."""
    path = tb.log_dir / f"fit_step{step:06d}.png"
    tb.figure("plots/fit", task.figure(task.model, step), step, path)
    return path


def _step_scalars(
    closure: Closure, optimizer: Any, named: list, ms: float, state: RunState
) -> dict[str, float]:
    """A logged step's scalars: loss, ‖∇loss‖, saved bytes (kept in `state`), time, the
    optimizer's own, and each tensor's gradient norm."""
    state.saved_bytes = closure.saved_bytes
    values = {
        "loss/train": state.loss,
        "optim/grad_norm": closure.grad_norm,
        "optim/evals": closure.evals,
        "memory/saved_bytes": closure.saved_bytes,
        "time/step_ms": ms,
        "time/train_s": state.train_s,
    }
    values.update({f"optim/{k}": v for k, v in getattr(optimizer, "last_stats", {}).items()})
    values.update(grad_scalars(named))
    return values


class Closure:
    """The loss on one batch and its gradients, as `optimizer.step(closure)` evaluates it
    (zero grads, forward, loss, backward). Its first evaluation, at the parameters the step
    starts from, raises NonFiniteStep before any update if the loss or a gradient is not finite,
    and records ‖∇loss‖; with `count_saved`, the bytes the forward saved for backward."""

    def __init__(
        self, task: Task, forward: Callable[..., Any], batch: Any, optimizer: Any,
        count_saved: bool = False,
    ) -> None:
        self.task, self.forward, self.batch, self.optimizer = task, forward, batch, optimizer
        self.count_saved = count_saved
        self.evals, self.saved_bytes, self.grad_norm = 0, 0, math.nan

    def __call__(self) -> torch.Tensor:
        self.optimizer.zero_grad()
        # Counting costs a hook per saved tensor: only logged steps pay for it.
        with saved_tensor_bytes() if self.count_saved else nullcontext() as saved:
            residuals = self.task.residuals(self.forward, self.batch)
            loss = squared_error(residuals, self.task.reduction)
        loss.backward()
        self.evals += 1
        if self.evals == 1:
            if saved is not None:
                self.saved_bytes = saved.bytes
            params = list(self.task.model.parameters())
            self.grad_norm = grad_norm(params)
            if not torch.isfinite(loss.detach()):  # detached: no autograd record of the check
                raise NonFiniteStep("loss", loss.item())
            # A huge but finite gradient can overflow the norm: only then look at the entries.
            if not math.isfinite(self.grad_norm) and not all(
                bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None
            ):
                raise NonFiniteStep("gradient", loss.item())
        return loss
