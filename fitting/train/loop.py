"""The training loop: `optimizer.step(closure)` each step, logging to TensorBoard as configured,
checkpointing, and stopping cleanly on a signal, a converged fit or a non-finite loss."""

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
from typing import TYPE_CHECKING, Any

import torch

from fitting.optim.spec import OptimizerSpec, StepStats
from fitting.tasks import Task
from fitting.track.memory import StepMemory
from fitting.track.tb_logging import TBLogger, grad_norm, grad_scalars, param_scalars
from fitting.train.checkpoint import Checkpointer, LoopState
from fitting.train.closure import make_closure
from fitting.train.profile import PROFILED_STEPS
from fitting.train.signals import Diverged, Interrupted, NonFiniteStep, StopSignals
from fitting.train.stop_rule import StopRule

if TYPE_CHECKING:
    from fitting.config import Config

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
    memory: StepMemory | None = None  # the sampled steps' tensor peaks


@dataclass
class Parts:
    """What the loop runs: the task, its optimizer and the spec whose hooks the loop calls, the
    forward the closure computes the residuals with (e.g. the torch.compile'd model; None: the
    model itself), where events and figures go, the checkpointer (None: no checkpoints) and
    a hook called after each step (e.g. fitting.train.profile's)."""

    task: Task
    optimizer: torch.optim.Optimizer
    spec: OptimizerSpec
    tb: TBLogger
    out_dir: Path
    forward: Callable[..., Any] | None = None
    ckpt: Checkpointer | None = None
    after_step: Callable[[], None] = lambda: None


def fit(parts: Parts, cfg: Config, state: LoopState | None = None) -> FitResult:
    """Run up to `cfg.steps` optimizer steps on the task's model, logging as `cfg.log` says.

    `cfg.optimizer.stop` (see StopRule) ends the run early once converged. `state` (from a
    checkpoint) continues a run after its `state.step` steps; `parts.ckpt` saves one every
    `cfg.ckpt.every` steps and at the end. The run stops early, after saving the events and a
    checkpoint, on SIGINT/SIGTERM (raises Interrupted once its step is done) and at a step whose
    loss or gradient is not finite, before its update (raises Diverged, or FloatingPointError
    with on_nonfinite=raise).
    """
    return _Loop(parts, cfg, state).run()


class _Loop:
    """One call of `fit`: the loop's state between its steps."""

    def __init__(self, parts: Parts, cfg: Config, state: LoopState | None) -> None:
        self.parts, self.cfg = parts, cfg
        # Read once, not at every step: each DictConfig lookup costs microseconds.
        self.steps, log_cfg = cfg.steps, cfg.log
        self.every, self.figure_every, self.hist_every = (
            log_cfg.every, log_cfg.figure_every, log_cfg.hist_every)
        self.task, self.optimizer, self.spec = parts.task, parts.optimizer, parts.spec
        self.forward = parts.task.model if parts.forward is None else parts.forward
        self.named = list(self.task.model.named_parameters())
        self.params = [p for _, p in self.named]
        self.st = LoopState() if state is None else state
        stop = cfg.optimizer.stop
        self.stop = StopRule(stop.patience, stop.rtol, self.params[0].dtype)
        self.stop.quiet, self.stop.previous = self.st.quiet, self.st.previous
        self.val_every = cfg.log.val_every if self.task.has_validation else 0
        self.console_every = cfg.log.console_every or max(1, cfg.steps // 10)
        self.batch: Any = None  # the last step's
        self.saved_bytes = 0  # the last logged step's
        # torch runs one profiler at a time: the tensor peaks are sampled after profile=true's.
        first = PROFILED_STEPS if cfg.profile else 1
        self.memory = StepMemory(self.params[0].device, cfg.log.memory_every, first)
        self.wall_before, self.start = self.st.wall_s, time.perf_counter()

    def run(self) -> FitResult:
        """The steps from `state.step` on, then the end of the run (or its early stop)."""
        if self.st.step >= self.steps:
            raise ValueError(
                f"fit: nothing to do, {self.st.step} of steps={self.steps} already done"
            )
        converged, nonfinite = False, None
        self.task.model.train()
        with ExitStack() as stack:
            bar = stack.enter_context(progress_bar(self.steps, self.st.step))
            signals = stack.enter_context(StopSignals())
            for step in range(self.st.step, self.steps):
                try:
                    converged = self._step(step, bar)
                except NonFiniteStep as err:
                    nonfinite, err.step = err, step
                    break
                if converged or signals.received:
                    break
                ckpt = self.parts.ckpt
                if ckpt is not None and ckpt.due(self.st.step) and self.st.step < self.steps:
                    self._save("running")
        if nonfinite is not None:
            self._diverged(nonfinite)
        if signals.received and not converged and self.st.step < self.steps:
            self._save("interrupted")
            raise Interrupted(signals.received, self.st.step, self.steps,
                              str(self.parts.out_dir))
        self._save("converged" if converged else "completed")
        return self._result(converged)

    def _step(self, step: int, bar: Any) -> bool:
        """One optimizer step and its logging; True when the steps so far have converged."""
        task, st = self.task, self.st
        self.batch = task.batch(step)
        self.spec.prepare_batch(self.optimizer, task, self.batch)
        logging_step = step % self.every == 0 or step == self.steps - 1
        if step > 0 and self.figure_every and step % self.figure_every == 0:
            st.figures.append(str(self._figure(step)))
        if self.val_every and step % self.val_every == 0:
            st.val_loss = task.validate(task.model)
            self.parts.tb.scalars(step, {"loss/val": st.val_loss})
        # The parameters the step's loss is computed at, not those after its update; also
        # when this step may turn out to be the last (the stop rule decides after it).
        values = param_scalars(self.named) if logging_step or self.stop.close else None

        stats = StepStats(logged=values is not None)
        closure = make_closure(task, self.optimizer, self.batch, stats, self.forward,
                               self.params, check=True)
        t0 = time.perf_counter()
        with self.memory.measure(step, logging_step):
            loss = self.optimizer.step(closure)
        ms = (time.perf_counter() - t0) * 1e3
        self.spec.after_step(self.optimizer, stats)
        loss_value = loss.item()
        st.step_ms.append(ms)
        st.losses = [*st.losses[-1:], loss_value]
        st.step = step + 1
        if stats.logged:
            self.saved_bytes = stats.saved_bytes
        converged = self.stop.enabled and self.stop.update(loss_value)

        if logging_step or converged:
            values.update(self._step_scalars(step, loss_value, stats, ms))
            self.parts.tb.scalars(step, values)
            if bar is not None:
                bar.set_postfix_str(f"loss={loss_value:.5g}", refresh=False)
        if self.hist_every and step % self.hist_every == 0:
            self.parts.tb.histograms(step, self.named)
        if bar is not None:
            bar.update()
        self.parts.after_step()
        if (step + 1) % self.console_every == 0 or converged:
            log.info("step %d/%d  loss %.6g", step + 1, self.steps, loss_value)
        return converged

    def _step_scalars(
        self, step: int, loss: float, stats: StepStats, ms: float
    ) -> dict[str, float]:
        """A logged step's scalars after the parameters': loss, ‖∇loss‖, memory, time, the
        optimizer's own, and each tensor's gradient norm."""
        norm = stats.grad_norm
        values = {
            "loss/train": loss,
            "optim/grad_norm": grad_norm(self.params) if norm is None else norm,
            "memory/saved_bytes": stats.saved_bytes,
            **self.memory.scalars(step),
            "time/step_ms": ms,
        }
        values.update(self.spec.extra_scalars(self.optimizer, stats))
        values.update(grad_scalars(self.named))
        return values

    def _save(self, status: str) -> None:
        """Flush the events, then write the checkpoint (`status`: why)."""
        # Events first: once the checkpoint after step K exists, those up to K are on disk.
        st = self.st
        st.quiet, st.previous = self.stop.quiet, self.stop.previous
        st.wall_s = self.wall_before + time.perf_counter() - self.start
        self.parts.tb.flush()
        if self.parts.ckpt is not None:
            self.parts.ckpt.save(st, status)

    def _diverged(self, nonfinite: NonFiniteStep) -> None:
        """Save the run as it was before the non-finite step, then raise."""
        self._save("diverged")
        message = nonfinite.describe(self.st.losses)
        if self.cfg.on_nonfinite.value == "raise":
            raise FloatingPointError(message) from nonfinite
        raise Diverged(message, nonfinite.step)

    def _result(self, converged: bool) -> FitResult:
        """The end of the run: where it ended, validation, the final figure."""
        st, task = self.st, self.task
        final_loss = st.losses[-1]
        end, norm, rel_change = self._end_point(final_loss)
        if task.has_validation:
            st.val_loss = task.validate(task.model)
            self.parts.tb.scalars(st.step, {"loss/val": st.val_loss})
        st.figures.append(str(self._figure(st.step)))
        wall = self.wall_before + time.perf_counter() - self.start
        return FitResult(
            final_loss, st.val_loss, self.saved_bytes, statistics.median(st.step_ms), wall,
            [Path(f) for f in st.figures], st.step, converged, end, norm, rel_change,
            self.memory,
        )

    def _end_point(self, final_loss: float) -> tuple[float | None, float, float]:
        """The loss and ‖∇loss‖ where the run ended, and the last step's relative decrease."""
        if self.task.full_batch:
            # At the final parameters (fills .grad).
            closure = make_closure(self.task, self.optimizer, self.batch, StepStats(),
                                   self.forward, self.params)
            end = closure().item()
            rel_change = (final_loss - end) / abs(final_loss) if final_loss else 0.0
            return end, grad_norm(self.params), rel_change
        before = self.st.losses[0]
        two = len(self.st.losses) == 2
        rel_change = (before - final_loss) / abs(before) if two and before else 0.0
        return None, grad_norm(self.params), rel_change

    def _figure(self, step: int) -> Path:
        """Draw the task's figure of the fit at `step` into a PNG file and log it."""
        path = self.parts.out_dir / f"fit_step{step:06d}.png"
        self.parts.tb.figure("fit", self.task.figure(self.task.model, step), step, path)
        return path


def show_progress() -> bool:
    """A progress bar only on an interactive terminal: never in CI, logs or captured output."""
    return sys.stdout.isatty() and not os.environ.get("CI")


@contextmanager
def progress_bar(steps: int, done: int = 0) -> Iterator[Any]:
    """A tqdm bar on stdout (from `done` steps) when show_progress(), else None; console log
    lines are printed above it."""
    if not show_progress():
        yield None
        return
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    bar = tqdm(total=steps, initial=done, file=sys.stdout, unit="step")
    with logging_redirect_tqdm(), bar:
        yield bar
