"""run(cfg, out_dir) -> final loss, the app as a plain function (train.py's, and the tests'):
check the config, prepare the ops, build task and optimizer, claim the run dir (new, continued
or refused: fitting.rundir), train, report. It raises ConfigError (train.py: exit 2) or
Stopped(line, exit code): 1 diverged, 74 a write failed, 128 + n stopped by signal n."""

import json
import logging
import os
import signal
import threading
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from fitting.checkpoint import Checkpoint, restore
from fitting.config import ConfigError, check, short
from fitting.loop import NonFinite, SecondSignal, Signals, State, Stopped, Training, evaluate, train
from fitting.opcheck.boundary import Exited, OpRefused, limits, line, no_exit, resolve
from fitting.opcheck.precheck import precheck
from fitting.resume import resume_command, resume_config
from fitting.rundir import WRITE_FAULT, RunDir, fault
from fitting.slots import describe, source, uses
from fitting.track.files import NotAFile, write_atomic
from fitting.track.report import RESULTS, closing, profiler, results
from fitting.track.tensorboard import TensorBoard, hparam_values

log = logging.getLogger(__name__)


def run(cfg: DictConfig, out_dir: str | Path, overrides: list[str] | None = None) -> float:
    """Train as `cfg` says into `out_dir`; the last step's loss. `overrides`: the command line's
    (default Hydra's). Nothing is written before the config, the ops and the dir are accepted."""
    out, hydra = Path(out_dir).resolve(), _hydra()
    given = list(hydra.overrides.task if overrides is None and hydra else overrides or [])
    ckpt = Checkpoint(out)
    try:
        with RunDir(out) as rundir, ExitStack() as stack:
            _quiet_write_faults(stack)
            if cfg.resume is not None:
                cfg = resume_config(cfg, out, given)
            with _as_config_error():
                kind = get_class(cfg.task._target_)  # the task's class: its name and slots
            opt = hydra and hydra.runtime.choices.get("optimizer") or _name(cfg.optimizer)
            check(cfg, f"{kind.name}_{opt}")  # conf/task_optimizer/<task>_<optimizer>.yaml
            with _as_config_error():
                if kind.residuals is None and hasattr(get_class(cfg.optimizer._target_),
                                                      "residuals_at"):
                    raise ConfigError(f"optimizer={opt} fits residuals, and task={kind.name}'s "
                                      "loss is a cross-entropy: use adam, sgd, gd or lbfgs")
            device = torch.device(("cuda" if torch.cuda.is_available() else "cpu")
                                  if cfg.device == "auto" else str(cfg.device))
            dtype = getattr(torch, str(cfg.dtype))
            _torch_settings(cfg, stack)
            if any(_choice(cfg, slot) not in ("custom", "builtin") for slot in kind.slots):
                stack.enter_context(no_exit())  # your op's os._exit: one line, not exit 0
            ops, notes = _prepare_ops(cfg, kind.slots, device, dtype)
            with _as_config_error():
                torch.manual_seed(cfg.seed)  # the model's initialization; data have their own
                task = instantiate(cfg.task, ops=ops, device=device, dtype=dtype, seed=cfg.seed,
                                   _convert_="all")
                optimizer = instantiate(cfg.optimizer)(task.model.named_parameters())
                if cfg.scheduler and "lr" not in optimizer.defaults:
                    raise ConfigError(f"optimizer={_name(cfg.optimizer)} has no lr to schedule; "
                                      "scheduler=none")
                scheduler = instantiate(cfg.scheduler)(optimizer) if cfg.scheduler else None
            payload = rundir.claim(cfg, given, HydraConfig.instance().cfg if hydra else None)
            state = State() if payload is None else restore(payload, task, optimizer, scheduler)
            ckpt.saved = payload and state.step
            info = _describe(cfg, kind.name, device, ops) | {"overrides": given}
            log.info("run dir: %s", out)  # first, as soon as it is the run's
            log.info("task=%s %s %s", info["task"], " ".join(
                f"ops.{s}={t}" for s, t in info["ops"].items()), info["run"].split(" ", 1)[1])
            for note in notes:
                log.warning("%s", note)
            if not rundir.new:
                log.info("resuming %s after step %d of %d (%s)", out, state.step, cfg.steps,
                         "resume=" if cfg.resume else "its own config: a restarted or requeued job")
            return _train(cfg, out, (task, optimizer, scheduler), state, ckpt, info, stack,
                          rundir.new)
    except NotAFile as err:  # a link, dir or fifo planted where the app keeps a file
        raise ConfigError(str(err)) from None
    except OSError as err:  # a full disk, a read-only dir: the path, the reason, what is left
        events = sorted(out.glob("events.out.tfevents.*"))  # TensorBoard's names no file
        raise Stopped(f"{fault(err, events[-1] if events else out)}; {last(ckpt)}",
                      WRITE_FAULT) from None


def _prepare_ops(cfg: DictConfig, slots: tuple[str, ...], device: torch.device,
                 dtype: torch.dtype) -> tuple[dict[str, Any], list[str]]:
    """The function ops.<slot> names for each slot the task's model calls, resolved once, a
    user's op pre-checked for the uses this run makes of it; ConfigError if one is refused;
    and the note lines of the ops that differ from their contracts."""
    ops, needs, notes = {}, uses(_name(cfg.optimizer), cfg.compile), []
    for slot in slots:
        choice = _choice(cfg, slot)
        key = f"ops.{slot}={describe(choice)}"
        try:  # its one line whole: a pre-check's ends with the card's command
            ops[slot] = resolve(slot, choice, key, device)
            if choice not in ("custom", "builtin"):
                with limits(cfg.op_limit_s, cfg.op_first_limit_s):
                    note = precheck(slot, ops[slot], device=device, dtype=dtype, choice=choice,
                                    key=key, uses=needs)
                notes += [note] * bool(note)  # a first-order difference: the run answers it
        except OpRefused as err:
            raise ConfigError(str(err)) from None
    return ops, notes


def _choice(cfg: DictConfig, slot: str) -> str | dict:
    """ops.<slot> as plain data: custom, builtin, module:name, or a _target_ dict."""
    choice = cfg.ops[slot]
    return OmegaConf.to_object(choice) if isinstance(choice, DictConfig) else str(choice)


def _name(optimizer: DictConfig) -> str:
    """An optimizer's short name, from its _target_ (fitting.optim.LM -> lm)."""
    return optimizer._target_.rsplit(".", 1)[-1].lower()


def last(ckpt: Checkpoint) -> str:
    """Where the run can go on from: the last phrase of a stopped run's line."""
    if not ckpt.path.is_file():
        return "no checkpoint is left to resume from: start the run again"
    after = "" if ckpt.saved is None else f" (after step {ckpt.saved})"
    return (f"the last good checkpoint is {ckpt.path}{after}; resume with: "
            f"{resume_command(ckpt.path.parent)}")


def _describe(cfg: DictConfig, task: str, device: torch.device, ops: dict) -> dict[str, Any]:
    """The run in words: task, optimizer, each op's choice (a user's with its source file's
    sha256, so two versions read as two) and the rest (`run`, one line)."""
    opt = _name(cfg.optimizer)
    choices = {s: _choice(cfg, s) for s in ops}
    sources = {s: found for s, c in choices.items()
               if c not in ("custom", "builtin") and (found := source(ops[s]))}
    lr = f"(lr={cfg.optimizer.lr:g})" if "lr" in cfg.optimizer else ""
    return {"task": task, "optimizer": opt, "op_sources": sources,
            "ops": {s: describe(c) + (f" @{sources[s]['sha256'][:8]}" if s in sources else "")
                    for s, c in choices.items()},
            "run": f"{task} optimizer={opt}{lr} steps={cfg.steps} seed={cfg.seed} "
                   f"dtype={cfg.dtype} device={device}"}


def _torch_settings(cfg: DictConfig, stack: ExitStack) -> None:
    """Threads and determinism for the run, restored when `stack` closes."""
    stack.callback(torch.set_num_threads, torch.get_num_threads())
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what CUDA's cuBLAS needs
        stack.callback(torch.use_deterministic_algorithms,
                       torch.are_deterministic_algorithms_enabled())
        torch.use_deterministic_algorithms(True)


def _train(cfg: DictConfig, out: Path, built: tuple[Any, Any, Any], state: State,
           ckpt: Checkpoint, info: dict[str, Any], stack: ExitStack, new: bool) -> float:
    """Train, then end the run: checkpoint, results.json and closing lines, or Stopped."""
    task, optimizer, scheduler = built
    tb = stack.enter_context(TensorBoard(out, purge_step=None if new else state.step))
    joblib = _hydra() and _hydra().runtime.choices.get("hydra/launcher") == "joblib"
    signals = stack.enter_context(Signals(os.getppid() if joblib else None))
    prof = stack.enter_context(profiler(out) if cfg.profile else nullcontext())

    def save(status: str, summary: dict[str, float] | None = None) -> None:
        tb.writer.flush()
        state.loss = float(state.loss)  # a logged step's, or read off the device now
        # Saving reads the weights off the device anyway: only finite ones replace a checkpoint.
        if all(bool(p.isfinite().all()) for p in task.model.parameters()):
            ckpt.save(cfg, task, optimizer, scheduler, asdict(state), status)
        elif status == "running":
            raise NonFinite(f"weights after step {state.step}")
        if status != "running":
            results(out, status, cfg, state, loop.times, info, summary or {})

    loop = Training(cfg, task, optimizer, state, tb, signals, save, prof=prof, scheduler=scheduler,
                    forward=torch.compile(task.model) if cfg.compile else task.model)
    try:
        train(loop)
        if signals.signum is not None and not state.converged and state.step < cfg.steps:
            save("interrupted")
            said = (f"interrupted by {signal.Signals(signals.signum).name} after {state.step} of "
                    f"{cfg.steps} steps; {last(ckpt)}")
            previous = signals.previous.get(signal.SIGUSR2)
            if signals.signum == signal.SIGUSR2 and callable(previous):
                log.warning("%s; handing over to submitit, which requeues the job", said)
                signals.__exit__()  # submitit's handlers back: its requeue's SIGTERM is its own
                previous(signal.SIGUSR2, None)  # submitit's: it requeues the job
            raise Stopped(said, 128 + signals.signum)
        with torch.random.fork_rng():  # the end's figure draws nothing a continuation would
            fig, summary = evaluate(task, tb, state, state.step, True, True), \
                task.summary(task.model)
        tb.hparams(hparam_values(info, cfg, info["overrides"]))
        save("converged" if state.converged else "completed", summary)
        if signals.signum not in (None, signal.SIGUSR2):  # during the end: results whole, stop
            raise Stopped(f"stopped by {signal.Signals(signals.signum).name} at the run's end, "
                          f"its results whole: {out / RESULTS}", 128 + signals.signum)
    except NonFinite as err:
        save("diverged")  # found on a logged step: the weights may be non-finite already
        message = (f"non-finite {err} at step {state.step} (checked on logged steps, "
                   f"log.every={cfg.log.every}); try a smaller optimizer.lr; {last(ckpt)}")
        if cfg.on_nonfinite == "raise":
            raise FloatingPointError(message) from err
        raise Stopped(message, 1) from None
    except SecondSignal as err:
        raise Stopped(f"stopped at once by a second {signal.Signals(err.args[0]).name}; "
                      f"{last(ckpt)}", 128 + err.args[0]) from None
    except (Exception, SystemExit, KeyboardInterrupt, Exited) as err:
        raise _failed(err, out, cfg, state, loop.times, info, ckpt) from None
    closing(cfg, out, task, state, loop.times, summary, fig,
            bool(_hydra()) and _hydra().mode.name == "MULTIRUN")
    return state.loss


def _failed(err: BaseException, out: Path, cfg: DictConfig, state: State, times: list[float],
            info: dict[str, Any], ckpt: Checkpoint) -> BaseException:
    """A failed write or the app's own error as it is, your op's as one line; results failed."""
    yours = [f"ops.{s}={t}" for s, t in info["ops"].items() if t not in ("custom", "builtin")]
    if isinstance(err, Stopped) or not (yours or isinstance(err, OSError)):
        return err
    with suppress(OSError):
        results(out, "failed", cfg, state, times, info, {})
    return err if isinstance(err, OSError) else Stopped(
        f"your op ({', '.join(yours)}) failed in training at step {state.step}, not in its "
        f"pre-check: {err if isinstance(err, Exited) else line(err)}; {last(ckpt)}", 1)


def _quiet_write_faults(stack: ExitStack) -> None:
    """While the run lives, a failed write is the run's one line, no thread's traceback:
    TensorBoard's writer thread raises it again in this one, a log file's is left unsaid."""
    hook, raising = threading.excepthook, logging.raiseExceptions
    threading.excepthook = lambda args: None if issubclass(args.exc_type, OSError) else hook(args)
    logging.raiseExceptions = False
    stack.callback(setattr, threading, "excepthook", hook)
    stack.callback(setattr, logging, "raiseExceptions", raising)


def failed(out: str | Path, line: str, code: int, err: Exception) -> None:
    """A sweep's job that failed, for the sweep's end: its line and exit status (a bug's
    traceback too) in its results.json. Another run's dir (a refused job's) is left as it is."""
    path, hydra = Path(out) / RESULTS, _hydra()
    if isinstance(err, ConfigError) and (path.exists() or (path.parent / ".hydra").exists()):
        return  # another run's dir
    with suppress(OSError, ValueError):
        record = {"status": "failed", **(json.loads(path.read_text()) if path.is_file() else {}),
                  "exit": code, "reason": line,
                  "overrides": list(hydra.overrides.task) if hydra else []}
        if record["status"] == "completed":  # then failed (its code left threads running)
            record["status"] = "failed"
        if not isinstance(err, ConfigError | Stopped):
            record["traceback"] = "".join(traceback.format_exception(err))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(record, indent=2) + "\n").encode())


@contextmanager
def _as_config_error() -> Iterator[None]:
    """A range check's ValueError, a wrong key's TypeError, a bad _target_, a task too large to
    allocate: a ConfigError."""
    try:
        yield
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, MemoryError | RuntimeError) and "allocate" in str(cause):
            raise ConfigError(f"the task does not fit in memory ({short(cause, 200)}); make "
                              "it smaller (task.n_points, task.n_train, ...)") from None
        if not isinstance(cause, ValueError | TypeError | ImportError):
            raise
        raise ConfigError(short(cause, 300)) from None
    except (ValueError, ImportError) as err:
        raise ConfigError(short(err, 300)) from None


def _hydra() -> Any:
    """Hydra's runtime config inside a Hydra app, else None (run() called as a function)."""
    return HydraConfig.get() if HydraConfig.initialized() else None
