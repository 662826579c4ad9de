"""A user's op enters here (resolve): its import, forward and backward run inside a boundary where
every way to fail to return is one line (CannotRun), never a traceback, a hang or an exit."""

import inspect
import os
import pkgutil
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from hydra.utils import instantiate

from fitting.slots import SLOTS, describe
from models.ops import unwrap

LIMIT_S = 30.0  # per call: generous for a real op on tiny inputs on a busy 2-core box
FIRST_LIMIT_S = 300.0  # an op's first call, which may compile (torch.compile, a JIT, a C++ build)


class CannotRun(Exception):
    """The op cannot run as its slot calls it; the message is one line."""


class _Expired(BaseException):  # not an Exception: an op's `except Exception` cannot swallow it
    pass


def _expire(signum: int, frame: object) -> None:
    raise _Expired


@contextmanager
def limits(per_call: float, first: float) -> Iterator[None]:
    """The time limits inside (the card's --limit/--first-limit, the app's op_limit_s...)."""
    global LIMIT_S, FIRST_LIMIT_S
    before, (LIMIT_S, FIRST_LIMIT_S) = (LIMIT_S, FIRST_LIMIT_S), (per_call, first)
    try:
        yield
    finally:
        LIMIT_S, FIRST_LIMIT_S = before


@contextmanager
def guarded(first: bool = False) -> Iterator[None]:
    """User code inside: a time limit (SIGALRM, main thread; an outer timer, e.g. pytest-timeout's,
    is put back with its time left; `first`: an op's first call's), and sys.exit,
    KeyboardInterrupt, a hang or an exhausted memory as CannotRun."""
    main, limit = threading.current_thread() is threading.main_thread(), \
        FIRST_LIMIT_S if first else LIMIT_S
    if main:
        previous = signal.signal(signal.SIGALRM, _expire)
        outer, interval = signal.setitimer(signal.ITIMER_REAL, limit)
        start = time.monotonic()
    try:
        yield
    except _Expired:
        if first:
            raise CannotRun(f"its first call did not return within {limit:g} s (the limit of a "
                            "first call, which may compile: --first-limit, op_first_limit_s)"
                            ) from None
        raise CannotRun(f"it did not return within {limit:g} s (the limit per call, after the "
                        "first: --limit, op_limit_s): an endless loop or a wait?") from None
    except (SystemExit, Exited) as err:
        raise CannotRun(f"it called {'sys.exit' if isinstance(err, SystemExit) else 'os._exit'}"
                        f"({err.code!r}); an op returns or raises") from None
    except KeyboardInterrupt:
        raise CannotRun("it raised KeyboardInterrupt (or Ctrl-C stopped it)") from None
    except (MemoryError, RuntimeError) as err:
        text = str(err)
        if not isinstance(err, MemoryError | torch.OutOfMemoryError) and \
                "allocate memory" not in text and "out of memory" not in text:
            raise
        raise CannotRun(f"it ran out of memory: {text.splitlines()[0][:200] if text else ''}"
                        ) from None
    finally:
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer:
                left = max(outer - (time.monotonic() - start), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, interval)


class Exited(BaseException):
    """os._exit(code) called by user code under no_exit(): not the process's end."""

    def __init__(self, code: int) -> None:
        super().__init__(f"it called os._exit({code})")
        self.code = code


@contextmanager
def no_exit() -> Iterator[None]:
    """While a user's op may run (its import, pre-check, training): os._exit raises Exited, so
    that the run ends in one line, not the process with exit 0 and nothing said."""
    real, os._exit = os._exit, _raise_exited
    try:
        yield
    finally:
        os._exit = real


def _raise_exited(code: int) -> None:
    raise Exited(code)


def form(obj: object) -> str:
    """What a call returned, in words: `tensor (4, 8) float32`, `tuple of 3 tensors`, `int`."""
    if isinstance(obj, torch.Tensor):
        return f"tensor {tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
    if isinstance(obj, list | tuple):
        return f"{type(obj).__name__} ({', '.join(form(o) for o in obj)})"
    return type(obj).__name__


class OpRefused(ValueError):
    """An op its slot cannot use (it does not resolve, cannot run, or fails a use); one line."""


def op(slot: str, choice: Any) -> Callable:
    """The function `slot` runs for `choice` (what `resolve` has Hydra instantiate)."""
    if callable(choice):  # Hydra already built it from a {_target_: ..., _partial_: true} choice
        return choice
    if choice in ("custom", "builtin"):
        return SLOTS[slot].ours if choice == "custom" else SLOTS[slot].twin
    return load(str(choice))


def load(spec: str) -> Callable:
    """A user's op named `<module>:<name>`, imported from the current dir or PYTHONPATH; a
    torch.autograd.Function subclass as its `.apply`."""
    module, _, name = spec.partition(":")
    if not (module and name):  # torch.nn.functional.silu: a dot for the colon
        fix = f"; did you mean {':'.join(spec.rsplit('.', 1))}?" if "." in spec else ""
        raise ValueError("expected custom, builtin, <module>:<name> or "
                         "{_target_:<module>.<name>,_partial_:true,<arg>:<value>}" + fix)
    top, cwd = module.split(".")[0], os.getcwd()
    mine = next((p for p in (f"{top}.py", f"{top}/__init__.py") if os.path.isfile(p)), None)
    loaded = getattr(sys.modules.get(top), "__file__", None)
    if mine and loaded and not os.path.samefile(mine, loaded):  # the lab's package wins
        owner = "the lab's package" if top in ("models", "fitting") else "the module imported as"
        raise ValueError(f"{spec}: your {os.path.abspath(mine)} is hidden by {owner} {top}; "
                         f"rename it (e.g. my_{top}.py) and name the new module")
    sys.path.insert(0, cwd)
    try:
        obj = pkgutil.resolve_name(spec)
    except ModuleNotFoundError as err:
        obj = err  # raised below, outside this block: `line` reads the innermost error
    finally:
        sys.path.remove(cwd)
    if isinstance(obj, ModuleNotFoundError):
        if obj.name != top:
            raise obj
        raise ModuleNotFoundError(f"no module {top} in the current dir ({cwd}) or on PYTHONPATH "
                                  f"({os.environ.get('PYTHONPATH') or 'unset'})")
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return obj.apply
    if not callable(obj):
        raise ValueError(f"{spec}: {name} is a {type(obj).__name__}, not callable")
    return obj


def resolve(slot: str, choice: Any, key: str | None = None, device: Any = None) -> Callable:
    """The function a choice names, a {_target_: ...} choice built by Hydra's instantiate, the
    user's module imported inside the boundary; OpRefused, one line naming `key`, if none.
    On a CPU device, Triton kernels its module defines run under Triton's interpreter."""
    key = key or f"ops.{slot}={describe(choice)}"
    late = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
    if choice not in ("custom", "builtin") and device is not None and \
            torch.device(device).type == "cpu":  # a user's module: read as its @triton.jit runs
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        with guarded(first=True):  # importing the user's module runs its code
            fn = instantiate({"_target_": f"{__name__}.op", "slot": slot, "choice": choice})
    except Exception as err:  # noqa: BLE001  an import error, a bad _target_, the user's code
        partial = isinstance(choice, dict) and not choice.get("_partial_")
        raise OpRefused(f"{key}: {line(err)}" + "; add _partial_: true" * partial) from None
    if not callable(fn) or isinstance(fn, torch.Tensor):
        raise OpRefused(f"{key}: not a function; give _target_ and _partial_: true")
    if late and interpreted(fn):  # triton's own kernels (tl.sigmoid) were defined natively
        raise OpRefused(f"{key}: triton was imported before TRITON_INTERPRET=1 was set, so its "
                        "kernels cannot run on this CPU: TRITON_INTERPRET=1 python ...")
    return fn


def interpreted(fn: Callable) -> bool:
    """Whether fn runs Triton kernels under Triton's interpreter (TRITON_INTERPRET=1): its module,
    or one it imports or takes a name from, imports triton (torch's own, for compile, aside)."""
    module = sys.modules.get(getattr(unwrap(fn)[0], "__module__", ""))
    if os.environ.get("TRITON_INTERPRET") != "1" or not module:
        return False
    near = [module, *(v if type(v) is types.ModuleType else sys.modules.get(
        str(getattr(v, "__module__", ""))) for v in vars(module).values())]
    return any(type(v) is types.ModuleType and v.__name__.split(".")[0] == "triton"
               for m in near if m and m.__name__.split(".")[0] != "torch" for v in vars(m).values())


def param_names(*fns: Callable) -> list[str]:
    """The positional parameter names of the first of `fns` that shows any (a Function: its
    forward's, less ctx; a torch.library op: the function it was made from)."""
    for fn in fns:
        fn, skip = unwrap(fn)[0], 0
        if isinstance(fn, type):  # an autograd.Function
            fn, skip = fn.forward, fn.setup_context is torch.autograd.Function.setup_context
        try:
            params = list(inspect.signature(getattr(fn, "_init_fn", fn)).parameters.values())
        except (TypeError, ValueError):
            continue
        names = [p.name for p in params[skip:]
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if names:
            return names
    return []


def line(err: BaseException) -> str:
    """`Type: first line` of the innermost cause (the real one under a framework's rethrows);
    a CannotRun's own words."""
    frames = [f.filename for f in traceback.extract_tb(err.__traceback__)]
    while not isinstance(err, CannotRun) and (err.__cause__ or err.__context__):
        err = err.__cause__ or err.__context__
    if isinstance(err, CannotRun):
        return str(err)
    if "active drivers" in str(err):  # Triton's, where it finds no GPU
        return "Triton finds no GPU here: " + ("it needs one under its interpreter too" if
                                               os.environ.get("TRITON_INTERPRET") == "1" else
                                               "TRITON_INTERPRET=1 python ... runs its kernels "
                                               "on the CPU (set before they are defined)")
    lines = [s.strip() for s in str(err).splitlines() if s.strip()]
    where = next((f" ({s})" for s in lines if s.startswith("Caused by:")), "")  # dynamo's
    if any(f.endswith("triton/runtime/interpreter.py") for f in frames):
        where += " (inside Triton's interpreter, which does not run every kernel: try a GPU)"
    return f"{type(err).__name__}: {lines[0]}{where}"[:300] if lines else type(err).__name__
