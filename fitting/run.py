"""The app as a plain function, run(cfg, out_dir) -> final loss (train.py calls it; tests call it
with a config from Hydra's compose API): check, choose the ops, build the task and optimizer,
start or resume, train, report."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from fitting.checkpoint import LOCK, Checkpoint, existing, lock, restore, resume_config, short
from fitting.config import CHECKPOINT, ConfigError, check
from fitting.loop import NonFinite, SecondSignal, Signals, State, Stopped, figure, train
from fitting.ops import describe_op, precheck, resolve_op
from fitting.track.memory import peak_rss_bytes
from fitting.track.tensorboard import TensorBoard

log = logging.getLogger(__name__)
RESULTS, TRACE = "results.json", "profile.pt.trace.json"


def run(cfg: DictConfig, out_dir: str | Path, overrides: list[str] | None = None) -> float:
    """Train as `cfg` says, into `out_dir`; return the last step's loss. `overrides`: the command
    line's, of which resume= takes a few (default: Hydra's). A config error raises ConfigError
    and leaves no run dir; a run that ends early raises Stopped after its checkpoint."""
    out = Path(out_dir).resolve()
    try:
        return _run(cfg, out, overrides)
    except ConfigError:
        if out.is_dir() and not (out / CHECKPOINT).exists() and all(
                p.name in (".hydra", LOCK) or p.suffix == ".log" for p in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)  # what Hydra made for this run, nothing else
        raise


def _run(cfg: DictConfig, out: Path, overrides: list[str] | None) -> float:
    if cfg.resume is not None:
        if _multirun():
            raise ConfigError("resume= continues one run: leave -m/--multirun out")
        if overrides is None and HydraConfig.initialized():
            overrides = list(HydraConfig.get().overrides.task)
        cfg = resume_config(cfg.resume, out, overrides or [])
    check(cfg)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu")
                          if cfg.device == "auto" else str(cfg.device))
    dtype = getattr(torch, str(cfg.dtype))
    task_class, opt_class = _class(cfg, "task"), _class(cfg, "optimizer")
    choices = {slot: _plain(cfg.ops[slot]) for slot in task_class.slots}
    info = {"task": task_class.__name__.removesuffix("Task").lower(),
            "optimizer": cfg.optimizer._target_.rsplit(".", 1)[-1].lower(),
            "ops": {slot: describe_op(choice) for slot, choice in choices.items()}}
    # The op choices are named before any of them is imported.
    rest = f"{_describe(cfg.optimizer)} steps={cfg.steps} seed={cfg.seed} dtype={cfg.dtype} " \
           f"device={device}"
    info["run"] = f"{info['task']} optimizer={rest}"
    log.info("task=%s %s optimizer=%s", info["task"],
             " ".join(f"ops.{s}={t}" for s, t in info["ops"].items()), rest)
    needs = getattr(opt_class, "needs", ())
    ops = {slot: _op(slot, choice, needs, device, dtype) for slot, choice in choices.items()}
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        stack.enter_context(lock(out))
        _threads(stack, cfg, device)
        torch.manual_seed(cfg.seed)  # the model's initialization; data have their own generator
        task = _build(lambda: instantiate(cfg.task, ops=ops, device=device, dtype=dtype,
                                          seed=cfg.seed, _convert_="all"))
        optimizer = _build(lambda: instantiate(cfg.optimizer)(task.model.named_parameters()))
        payload = existing(out, cfg)
        state = State() if payload is None else State(**restore(payload, task, optimizer))
        ckpt = Checkpoint(out, cfg, task, optimizer, None if payload is None else state.step)
        if payload is not None:
            log.info("resuming %s after step %d of %d (%s)", out, state.step, cfg.steps,
                     "resume=" if cfg.resume else "its own config: a restarted or requeued job")
        return _train(cfg, out, task, optimizer, state, ckpt, info, stack)


def _train(cfg: DictConfig, out: Path, task: Any, optimizer: Any, state: State,
           ckpt: Checkpoint, info: dict[str, Any], stack: ExitStack) -> float:
    """Train, then end the run: completed or converged (final validation, figure, checkpoint,
    results.json, closing lines), or stopped (checkpoint, results.json, Stopped)."""
    forward = torch.compile(task.model) if cfg.compile else task.model
    tb = stack.enter_context(TensorBoard(out, purge_step=ckpt.saved))
    signals = stack.enter_context(Signals(_joblib_parent()))
    prof = stack.enter_context(_profiler(cfg.profile, out))
    times: list[float] = []

    def save(status: str) -> None:
        tb.flush()
        ckpt.save(state.settle(), status)

    def end(status: str, summary: dict[str, float] | None = None) -> None:
        save(status)
        _results(out, status, cfg, state, times, info, summary or {})

    try:
        train(cfg, task, optimizer, tb, save, state, signals, forward, prof, times)
        if signals.signum is not None and not state.converged and state.step < cfg.steps:
            end("interrupted")
            signals.hand_over()
            name = _signame(signals.signum)
            raise Stopped(f"interrupted by {name} after {state.step} of {cfg.steps} steps; "
                          f"{ckpt.last()}", 128 + signals.signum)
        val = task.validate(task.model)
        if val is not None:
            state.val_loss = val
            tb.scalars(state.step, {"loss/val": val})
        fig = figure(tb, task, state.step)
        summary = task.summary(task.model)
        tb.hparams(info["ops"], info["run"])
        end("converged" if state.converged else "completed", summary)
    except NonFinite as err:
        end("diverged")
        last = f"last loss {state.loss:.6g}" if state.step else "the first step"
        message = (f"non-finite {err} at step {state.step} ({last}); stopped before its "
                   f"update, try a smaller optimizer.lr; {ckpt.last()}")
        if cfg.on_nonfinite == "raise":
            raise FloatingPointError(message) from err
        raise Stopped(message, 1) from None
    except SecondSignal as err:
        raise Stopped(f"stopped at once by a second {_signame(err.args[0])}; {ckpt.last()}",
                      128 + err.args[0]) from None
    except OSError as err:
        with suppress(OSError):
            _results(out, "failed", cfg, state, times, info, {})
        raise Stopped(f"could not write {os.fsdecode(err.filename or '')}: "
                      f"{err.strerror or err}; {ckpt.last()}", 74) from None
    for line in _closing(cfg, out, task, state, times, summary, fig):
        log.info("%s", line)
    return state.loss


def _closing(cfg: DictConfig, out: Path, task: Any, state: State, times: list[float],
             summary: dict[str, float], fig: Path) -> list[str]:
    """The fitted model, the final loss and its cost, why the run stopped, the task's final
    numbers, the figure, the run dir (and, outside a sweep, the TensorBoard command)."""
    val = "" if state.val_loss is None else f", validation loss {state.val_loss:.6g}"
    saved = f", {state.saved_bytes:,} bytes saved for backward" if state.saved_bytes else ""
    why = (f"converged after {state.step} of {cfg.steps} steps" if state.converged
           else f"ran all {state.step} steps")
    change = (state.loss - state.prev_loss) / abs(state.prev_loss) if state.prev_loss else 0
    if change == 0:
        why += "; the last step left the loss unchanged"
    elif math.isfinite(change):
        how = "lowered" if change < 0 else "raised"
        why += f"; the last step {how} the loss by {abs(change):.3g}"
    summary = dict(summary)
    gap, optimum = summary.pop("rel_gap", None), summary.pop("optimum_loss", None)
    if gap is not None:  # poly3: the loss at the final parameters against the exact optimum
        why += (f"; at the exact optimum {optimum:.12g} within rounding" if abs(gap) < 1e-12
                else f"; {gap:.3g} relative above the exact optimum {optimum:.12g}")
    lines = [f"Result: {task.describe(task.model)}",
             f"final loss {state.loss:.6g} after {state.step} steps{val} ({state.train_s:.2f} s "
             f"of training, median step {_median(times):.3f} ms{saved})",
             f"stopped: {why}",
             "at the end: " + ", ".join(f"{k}={v:.6g}" for k, v in summary.items()),
             f"figure: {fig}", f"run dir: {out}"]
    if not _multirun():  # a sweep prints one TensorBoard line at its end
        lines.append(f"view it: tensorboard --logdir {out}")
    return lines


def _results(out: Path, status: str, cfg: DictConfig, state: State, times: list[float],
             info: dict[str, Any], summary: dict[str, float]) -> None:
    """results.json, written whole: the run's end at full precision."""
    data = {"status": status, "step": state.step, "steps": cfg.steps,
            "final_loss": float(state.loss), "val_loss": state.val_loss,
            "step_ms_median": _median(times) if times else None,
            "saved_bytes": state.saved_bytes, "peak_rss_bytes": peak_rss_bytes(),
            "train_s": state.train_s, "task": info["task"], "optimizer": info["optimizer"],
            "ops": info["ops"], "summary": summary}
    tmp = out / (RESULTS + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, out / RESULTS)


def _median(times: list[float]) -> float:
    return times[len(times) // 2] if times else math.nan  # the loop keeps them sorted


def _signame(signum: int) -> str:
    return signal.Signals(signum).name


def _class(cfg: DictConfig, key: str) -> type:
    """The class cfg.<key>._target_ names (imported, not called)."""
    try:
        return get_class(cfg[key]._target_)
    except Exception as err:  # noqa: BLE001  no _target_, or it does not import
        raise ConfigError(f"{key}._target_: {short(err, 200)}") from None


def _plain(choice: Any) -> Any:
    """An ops.<slot> value as plain data: a string, or a dict (Hydra's _target_ form)."""
    return OmegaConf.to_container(choice, resolve=True) if isinstance(choice, DictConfig) \
        else str(choice)


def _describe(node: DictConfig) -> str:
    """'adam(lr=0.01)': the optimizer's name and its learning rate, if it takes one."""
    name = node._target_.rsplit(".", 1)[-1].lower()
    return f"{name}(lr={node.lr:g})" if "lr" in node else name


def _op(slot: str, choice: Any, needs: tuple, device: Any, dtype: Any) -> Callable:
    """The callable of ops.<slot>; a user's op pre-checked for the slot and the optimizer."""
    try:
        fn = resolve_op(slot, choice)
        if choice not in ("custom", "builtin"):
            precheck(slot, fn, device=device, dtype=dtype, needs=needs)
    except ValueError as err:  # OpChoiceError: one line naming ops.<slot>
        raise ConfigError(short(err, 300)) from None
    return fn


def _build(make: Callable[[], Any]) -> Any:
    """make(); a range check's ValueError (or a wrong key's TypeError) as a ConfigError."""
    try:
        return make()
    except InstantiationException as err:
        if not isinstance(err.__cause__, ValueError | TypeError | ImportError):
            raise
        raise ConfigError(short(err.__cause__, 300)) from None
    except ValueError as err:
        raise ConfigError(short(err, 300)) from None


def _threads(stack: ExitStack, cfg: DictConfig, device: torch.device) -> None:
    """torch's thread count and deterministic mode as cfg says, put back when the run ends."""
    stack.callback(torch.set_num_threads, torch.get_num_threads())
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.deterministic:
        if device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        stack.callback(torch.use_deterministic_algorithms,
                       torch.are_deterministic_algorithms_enabled())
        torch.use_deterministic_algorithms(True)


@contextmanager
def _profiler(on: bool, out: Path) -> Iterator[Any]:
    """profile=true: torch.profiler over steps 2-4 (after a skipped and a warm-up step): a
    Chrome trace in the run dir and the top ops by self CPU time in the log."""
    if not on:
        yield None
        return

    def ready(prof: Any) -> None:
        prof.export_chrome_trace(str(out / TRACE))
        log.info("profile of steps 2-4: %s (open it in https://ui.perfetto.dev); top ops:\n%s",
                 out / TRACE, prof.key_averages().table(sort_by="self_cpu_time_total",
                                                        row_limit=10))

    plan = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(schedule=plan, on_trace_ready=ready) as prof:
        yield prof


def _multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _joblib_parent() -> int | None:
    """The parent's pid in a joblib worker (the run stops if the parent goes), else None."""
    if HydraConfig.initialized() and "joblib" in str(
            HydraConfig.get().launcher.get("_target_", "")).lower():
        return os.getppid()
    return None
