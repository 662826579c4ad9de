"""The steps in nanoGPT's order (evaluate, batch, closure, optimizer.step, record, log, stop,
checkpoint), and what stops a run: a signal, a joblib sweep's parent gone, a non-finite step."""

import bisect
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call

from fitting.track.memory import peak_rss_bytes, shares_process, step_peak
from fitting.track.progress import Progress
from fitting.track.tensorboard import norms
from models.ops import saved_tensor_bytes

log = logging.getLogger(__name__)


class Stopped(Exception):
    """Stopped(message, exit code): a run that ended early, its checkpoint written."""


class NonFinite(Exception):
    """A non-finite loss or gradient at a step's start, raised before its update."""


class SecondSignal(Exception):
    """A second signal: stop now, mid-step."""


@dataclass
class State:
    """Where a run stands after `step` steps; `loss` stays a tensor (no sync) until logged."""

    step: int = 0
    loss: Any = math.nan  # the last step's loss, at the parameters it started from
    quiet: int = 0  # steps in a row that changed the loss by <= stop.rtol
    converged: bool = False
    val_loss: float | None = None
    train_s: float = 0.0  # seconds of training over every session of the run
    saved_bytes: int = 0  # bytes the forward saved for backward (last logged step)

    def record(self, loss: Tensor, seconds: float, read: bool, rtol: float, patience: int) -> None:
        """One more step done; the stop rule: `patience` steps in a row within rtol·|loss|."""
        new = loss.item() if read or patience else loss
        if patience:
            self.quiet = self.quiet + 1 if abs(new - self.loss) <= rtol * abs(new) else 0
            self.converged = self.quiet >= patience
        self.loss, self.step, self.train_s = new, self.step + 1, self.train_s + seconds


class Closure:
    """Loss and gradients on one batch; its first evaluation records the loss (with `count`,
    the bytes saved for backward) and, with `check`, raises NonFinite before any update."""

    def __init__(self, task: Any, forward: Callable, batch: Any, optimizer: Any,
                 count: bool = False, check: bool = True) -> None:
        self.task, self.forward, self.batch, self.optimizer = task, forward, batch, optimizer
        self.reduction, self.count, self.evals, self.saved_bytes = task.reduction, count, 0, 0
        self.check = check  # finiteness read off the device: only on steps that sync anyway
        self.loss = self.grad_norm = None  # tensors, set by the first evaluation

    def residuals(self, params: dict[str, Tensor] | None = None) -> Tensor:
        """prediction − target on the batch, with graph; `params` replace the model's own."""
        model = self.forward if params is None else partial(functional_call, self.task.model,
                                                              params)
        return self.evaluate(self.task.residuals, model, self.reduce)

    def evaluate(self, fn: Callable, model: Callable, reduce: Callable) -> Tensor:
        """fn(model, batch), with graph; the first evaluation records the loss, reduce(it)."""
        first, self.evals = self.evals == 0, self.evals + 1
        with saved_tensor_bytes() if first and self.count else nullcontext() as saved:
            out = fn(model, self.batch)
        if first:
            self.saved_bytes = 0 if saved is None else saved.bytes
            self.loss = reduce(out.detach())
            if self.check and not torch.isfinite(self.loss):  # a sync: logged steps only
                raise NonFinite(f"loss ({self.loss.item()})")
        return out

    def reduce(self, r: Tensor) -> Tensor:
        """The squared error of residuals `r`, summed or averaged as the task says."""
        return r.pow(2).sum() if self.reduction == "sum" else r.pow(2).mean()

    def __call__(self) -> Tensor:
        """zero_grad, forward, loss, backward; the loss."""
        first = self.evals == 0
        self.optimizer.zero_grad()
        if self.task.residuals is None:  # a task with its own loss (forecast's cross-entropy)
            loss = self.evaluate(self.task.loss, self.forward, lambda loss: loss)
        else:
            loss = self.reduce(self.residuals())
        loss.backward()
        if first and self.check:
            self.grad_norm = torch.nn.utils.get_total_norm(
                [p.grad for p in self.task.model.parameters() if p.grad is not None])
            if not torch.isfinite(self.grad_norm):
                raise NonFinite(f"gradient (loss {self.loss.item():.6g})")
        return loss


class Signals:
    """SIGINT/TERM/HUP/USR2 (SLURM's warning) set `signum`: stop after the step; a second raises
    SecondSignal. `parent` (a joblib sweep's) gone stops the run as SIGHUP does."""

    CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2)

    def __init__(self, parent: int | None = None) -> None:
        self.signum: int | None = None
        self.parent, self.previous = parent, {}

    def __enter__(self) -> "Signals":
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.CAUGHT}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise SecondSignal(signum)
        self.signum = signum  # only a flag: logging in a handler can deadlock

    def stopping(self) -> bool:
        """Whether the run must stop after this step."""
        if self.signum is None and self.parent is not None and os.getppid() != self.parent:
            self.signum = signal.SIGHUP
        return self.signum is not None


@dataclass
class Training:
    """The loop's one run: what its steps work on, write to (`save`) and are stopped by."""

    cfg: Any
    task: Any
    optimizer: Any
    state: State
    tb: Any
    signals: Signals
    save: Callable[[str], None]
    forward: Callable  # the model, or its torch.compile
    scheduler: Any = None  # a torch.optim.lr_scheduler, stepped after each step
    prof: Any = None
    times: list[float] = field(default_factory=list)  # each step's ms, sorted


def train(run: Training) -> None:
    """Steps state.step .. cfg.steps − 1 until converged or stopped; the last one is logged."""
    cfg, task, optimizer, state, times = run.cfg, run.task, run.optimizer, run.state, run.times
    named, steps, every = list(task.model.named_parameters()), cfg.steps, cfg.log
    rtol = 4 * torch.finfo(named[0][1].dtype).eps if cfg.stop.rtol is None else cfg.stop.rtol
    next_peak = 5 if cfg.profile else 1  # after the profiler's steps: one profiler at a time
    # Jobs sharing a process: no peak RSS of their own, a step's tensor peak (once) instead.
    memory_every = every.memory_every or (steps if shares_process() else 0)
    task.model.train()
    with Progress(steps, state.step) as progress:
        for step in range(state.step, steps):
            t0 = time.perf_counter()
            read = step % every.every == 0 or step == steps - 1  # the loss read off the device
            evaluate(task, run.tb, state, step, every.val_every and step % every.val_every == 0,
                     step and every.figure_every and step % every.figure_every == 0)
            closure = Closure(task, run.forward, task.batch(step), optimizer, count=read,
                              check=read or bool(cfg.stop.patience))
            sample = bool(memory_every) and read and step >= next_peak
            t_step = time.perf_counter()
            with step_peak(named[0][1].device) if sample else nullcontext() as peak:
                optimizer.step(closure)
            bisect.insort(times, ms := (time.perf_counter() - t_step) * 1e3)
            lr = run.scheduler.get_last_lr()[0] if run.scheduler is not None else None
            if run.scheduler is not None:
                run.scheduler.step()
            state.record(closure.loss, time.perf_counter() - t0, read, rtol, cfg.stop.patience)
            last = state.converged or run.signals.stopping() or state.step == steps
            if read or last:  # a logged step: the last one too, whatever stopped the run
                state.saved_bytes = closure.saved_bytes or state.saved_bytes  # counted if read
                run.tb.scalars(step, _scalars(run, closure, ms, lr, peak, named))
                if peak is not None:
                    next_peak = (step // memory_every + 1) * memory_every
            if every.hist_every and step % every.hist_every == 0:
                run.tb.histograms(step, named)
            if run.prof is not None:
                run.prof.step()
            progress.update(state.step, state.loss if read else None)
            if every.console_every and state.step % every.console_every == 0:
                log.info("step %d  loss %.6g", step, float(state.loss))
            if last:
                return  # the caller saves the end
            if cfg.ckpt.every and state.step % cfg.ckpt.every == 0:
                run.save("running")


def _scalars(run: Training, closure: Closure, ms: float, lr: float | None, peak: Any,
             named: list) -> dict[str, float]:
    """A logged step's scalars: its loss, time, memory, norms and the optimizer's numbers."""
    state, times, grad_norm = run.state, run.times, closure.grad_norm
    values = {"loss/train": state.loss, "optim/evals": closure.evals, "time/step_ms": ms,
              "time/step_ms_median": times[len(times) // 2], "time/train_s": state.train_s,
              "memory/saved_bytes": state.saved_bytes, "memory/peak_rss_bytes": peak_rss_bytes(),
              "memory/peak_bytes": peak and peak.bytes, "optim/lr": lr, **norms(named),
              "optim/grad_norm": None if grad_norm is None else grad_norm.item(),
              **{f"optim/{k}": v for k, v in getattr(run.optimizer, "last_stats", {}).items()}}
    return {k: v for k, v in values.items() if v is not None}  # those this step has


def evaluate(task: Any, tb: Any, state: State, step: int, val: bool, fig: bool) -> Any:
    """The validation loss (`val`) and the figure of the fit (`fig`, its path) at `step`."""
    if val and (loss := task.validate(task.model)) is not None:
        state.val_loss = loss
        tb.scalars(step, {"loss/val": loss})
    if fig:
        path = tb.log_dir / f"fit_step{step:06d}.png"
        tb.figure("plots/fit", task.figure(task.model, step), step, path)
        return path
    return None
