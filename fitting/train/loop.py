"""The training loop: `optimizer.step(closure)` each step, logging to TensorBoard as configured,
checkpointing, and stopping cleanly on a signal or a non-finite loss."""

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

from fitting.optim.second_order import SecondOrderOptimizer, residual_fn_from_model
from fitting.tasks import Task, squared_error
from fitting.track.tb_logging import TBLogger, grad_norm, grad_scalars, param_scalars
from fitting.train.checkpoint import Checkpointer, LoopState
from fitting.train.signals import Diverged, Interrupted, NonFiniteStep, StopSignals, check_finite
from models.ops import saved_tensor_bytes

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    """What a finished run reports: last step's loss (before its update, as the tutorial prints)
    and validation loss at the final parameters (None without a validation set).

    `steps` is the number of steps run: fewer than the budget when the stop rule found the fit
    converged (`converged`). `end_loss` and `grad_norm` are the loss and ‖∇loss‖ at the final
    parameters for full-batch tasks (`end_loss` None and `grad_norm` that of the last step's
    batch otherwise); `rel_change` is the relative decrease of the loss in the last step.
    """

    final_loss: float
    val_loss: float | None
    saved_bytes: int
    step_ms_median: float
    wall_s: float
    figures: list[Path] = field(default_factory=list)
    steps: int = 0
    converged: bool = False
    end_loss: float | None = None
    grad_norm: float = math.nan
    rel_change: float = math.nan


@dataclass
class StepStats:
    """What the closure saw during one optimizer step (it may run several times: lbfgs)."""

    evals: int = 0
    saved_bytes: int = 0
    want_norm: bool = False  # the loop logs this step: the check computes ‖∇loss‖ for it
    grad_norm: float | None = None
    # The gradients of the first evaluation, at the parameters the step started from.
    first_grads: list[torch.Tensor | None] = field(default_factory=list)


class StopRule:
    """Converged when `patience` consecutive steps changed the loss by at most `rtol`·|loss|
    (`rtol` None: 4 eps of `dtype`, a change within rounding). patience=0: never."""

    def __init__(self, patience: int, rtol: float | None, dtype: torch.dtype) -> None:
        self.patience = patience
        self.rtol = 4 * torch.finfo(dtype).eps if rtol is None else rtol
        self.quiet = 0  # consecutive steps without a change beyond rtol
        self.previous: float | None = None

    @property
    def enabled(self) -> bool:
        return self.patience > 0

    @property
    def close(self) -> bool:
        """One more quiet step would stop the run (the loop then keeps that step's parameters
        for logging)."""
        return self.enabled and self.quiet >= self.patience - 1

    def update(self, loss: float) -> bool:
        """Feed the loss at the start of a step; True when the steps so far have converged."""
        if self.previous is not None:
            change = abs(self.previous - loss)
            quiet = change <= self.rtol * abs(self.previous)
            self.quiet = self.quiet + 1 if quiet else 0
        self.previous = loss
        return self.enabled and self.quiet >= self.patience


def fit(
    task: Task,
    optimizer: torch.optim.Optimizer,
    steps: int,
    log_cfg: Any,
    tb: TBLogger,
    out_dir: Path,
    stop_cfg: Any = None,
    forward: Callable[..., Any] | None = None,
    *,
    ckpt: Checkpointer | None = None,
    state: LoopState | None = None,
    on_nonfinite: str = "stop",
) -> FitResult:
    """Run up to `steps` optimizer steps on `task.model`; log every `log_cfg.every` steps to `tb`.

    `stop_cfg` (patience, rtol; see StopRule) ends the run early once converged. `forward` is
    what the closure computes the residuals with (e.g. the torch.compile'd model; default the
    model itself); second-order optimizers get `residual_fn` of each batch from `task.model`.

    `state` (from a checkpoint) continues a run after its `state.step` steps; `ckpt` saves one
    every `ckpt.every` steps and at the end. The run stops early, after saving the events and
    a checkpoint, on SIGINT/SIGTERM (raises Interrupted once its step is done) and at a step
    whose loss or gradient is not finite, before its update (raises Diverged, or
    FloatingPointError with `on_nonfinite="raise"`).
    """
    model = task.model
    forward = model if forward is None else forward
    named = list(model.named_parameters())
    params = [p for _, p in named]
    every, hist_every, fig_every = log_cfg.every, log_cfg.hist_every, log_cfg.figure_every
    val_every = log_cfg.val_every if task.has_validation else 0
    console_every = log_cfg.console_every or max(1, steps // 10)
    patience, rtol = (0, None) if stop_cfg is None else (stop_cfg.patience, stop_cfg.rtol)
    st = LoopState() if state is None else state
    stop = StopRule(patience, rtol, params[0].dtype)
    stop.quiet, stop.previous = st.quiet, st.previous
    second_order = isinstance(optimizer, SecondOrderOptimizer)
    line_search = isinstance(optimizer, torch.optim.LBFGS)
    if st.step >= steps:
        raise ValueError(f"fit: nothing to do, {st.step} of steps={steps} already done")
    converged = False
    nonfinite: NonFiniteStep | None = None
    last_batch: Any = None
    model.train()
    wall_before, start = st.wall_s, time.perf_counter()

    def save(status: str) -> None:
        # Events first: once the checkpoint after step K exists, those up to K are on disk.
        st.quiet, st.previous = stop.quiet, stop.previous
        st.wall_s = wall_before + time.perf_counter() - start
        tb.flush()
        if ckpt is not None:
            ckpt.save(st, status)

    with ExitStack() as stack:
        bar = stack.enter_context(progress_bar(steps, st.step)) if show_progress() else None
        signals = stack.enter_context(StopSignals())
        for step in range(st.step, steps):
            batch = task.batch(step)
            if second_order and batch is not last_batch:
                optimizer.residual_fn = residual_fn_from_model(model, task.residuals, batch)
            last_batch = batch
            logging_step = step % every == 0 or step == steps - 1
            if step > 0 and fig_every and step % fig_every == 0:
                st.figures.append(str(_figure(task, tb, step, out_dir)))
            if val_every and step % val_every == 0:
                st.val_loss = task.validate(model)
                tb.scalars(step, {"loss/val": st.val_loss})
            # The parameters the step's loss is computed at, not those after its update; also
            # when this step may turn out to be the last (the stop rule decides after it).
            values = param_scalars(named) if logging_step or stop.close else None

            stats = StepStats(want_norm=values is not None)
            closure = make_closure(task, optimizer, batch, stats, forward, params, check=True)
            t0 = time.perf_counter()
            try:
                loss = optimizer.step(closure)
            except NonFiniteStep as err:
                nonfinite, err.step = err, step
                break
            ms = (time.perf_counter() - t0) * 1e3
            st.step_ms.append(ms)
            if stats.evals > 1:
                # LBFGS's line search left the gradients of its last trial point in .grad; log
                # (and histogram) those of the point the step started from, as for the others.
                for p, grad in zip(params, stats.first_grads, strict=True):
                    p.grad = grad
            loss_value = loss.item()
            st.losses = [*st.losses[-1:], loss_value]
            st.step = step + 1
            if stop.enabled and stop.update(loss_value):
                converged = True
                logging_step = True

            if logging_step:
                values["loss/train"] = loss_value
                norm = stats.grad_norm
                values["optim/grad_norm"] = grad_norm(params) if norm is None else norm
                values["memory/saved_bytes"] = stats.saved_bytes
                values["time/step_ms"] = ms
                if line_search:
                    values["optim/evals"] = stats.evals
                if second_order:
                    values["optim/damping"] = optimizer.last_stats["damping"]
                    values["optim/rel_step"] = optimizer.last_stats["rel_step"]
                values.update(grad_scalars(named))
                tb.scalars(step, values)
                if bar is not None:
                    bar.set_postfix_str(f"loss={loss_value:.5g}", refresh=False)
            if hist_every and step % hist_every == 0:
                tb.histograms(step, named)
            if bar is not None:
                bar.update()
            if (step + 1) % console_every == 0 or converged:
                log.info("step %d/%d  loss %.6g", step + 1, steps, loss_value)
            if converged or signals.received:
                break
            if ckpt is not None and ckpt.due(st.step) and st.step < steps:
                save("running")

    if nonfinite is not None:
        save("diverged")
        message = nonfinite.describe(st.losses)
        if on_nonfinite == "raise":
            raise FloatingPointError(message) from nonfinite
        raise Diverged(message, nonfinite.step)
    if signals.received and not converged and st.step < steps:
        save("interrupted")
        raise Interrupted(signals.received, st.step, steps, str(out_dir))
    save("converged" if converged else "completed")

    steps_run = st.step
    final_loss = loss_value
    saved_bytes = stats.saved_bytes
    if task.full_batch:
        # Where the run ended: loss and gradient at the final parameters (fills .grad).
        end = make_closure(task, optimizer, batch, StepStats(), forward, params)().item()
        norm = grad_norm(params)
        rel_change = (final_loss - end) / abs(final_loss) if final_loss else 0.0
    else:
        end, norm = None, grad_norm(params)
        before = st.losses[0]
        rel_change = (before - final_loss) / abs(before) if len(st.losses) == 2 and before else 0.0
    if task.has_validation:
        st.val_loss = task.validate(model)
        tb.scalars(steps_run, {"loss/val": st.val_loss})
    st.figures.append(str(_figure(task, tb, steps_run, out_dir)))
    wall = wall_before + time.perf_counter() - start
    return FitResult(
        final_loss, st.val_loss, saved_bytes, statistics.median(st.step_ms), wall,
        [Path(f) for f in st.figures], steps_run, converged, end, norm, rel_change,
    )


def make_closure(
    task: Task,
    optimizer: torch.optim.Optimizer,
    batch: Any,
    stats: StepStats,
    forward: Callable[..., Any] | None = None,
    params: list[torch.Tensor] | None = None,
    check: bool = False,
) -> Callable[[], torch.Tensor]:
    """The standard closure (zero grads, forward, loss, backward, return the loss), which also
    records in `stats` its evaluations, the bytes the forward saved for backward and the
    gradients of its first evaluation (of `params`).

    `check`: the first evaluation raises NonFiniteStep if the loss or a gradient of `params` is
    not finite (and stores ‖∇loss‖ in `stats` if it `want_norm`). Every optimizer evaluates the
    closure before changing any parameter, so that step's update is never applied."""
    forward = task.model if forward is None else forward

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        with saved_tensor_bytes() as counter:
            loss = squared_error(task.residuals(forward, batch), task.reduction)
        loss.backward()
        stats.evals += 1
        stats.saved_bytes = counter.bytes
        if stats.evals == 1 and params is not None:
            # zero_grad() sets .grad to None, so later evaluations make new tensors: keeping
            # references is enough.
            stats.first_grads = [p.grad for p in params]
            if check:
                stats.grad_norm = check_finite(loss, params, stats.want_norm)
        return loss

    return closure


def _figure(task: Task, tb: TBLogger, step: int, out_dir: Path) -> Path:
    """Draw the task's figure of the fit at `step` into a PNG file and log it."""
    path = out_dir / f"fit_step{step:06d}.png"
    tb.figure("fit", task.figure(task.model, step), step, path)
    return path


def show_progress() -> bool:
    """A progress bar only on an interactive terminal: never in CI, logs or captured output."""
    return sys.stdout.isatty() and not os.environ.get("CI")


@contextmanager
def progress_bar(steps: int, done: int = 0) -> Iterator[Any]:
    """A tqdm bar on stdout (from `done` steps); console log lines are printed above it."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    bar = tqdm(total=steps, initial=done, file=sys.stdout, unit="step")
    with logging_redirect_tqdm(), bar:
        yield bar
