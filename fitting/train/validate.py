"""One pass over a composed config that rejects out-of-range values before anything is built.

Hydra already rejects unknown keys, wrong types and unknown options while composing; this checks
what types cannot say (lr > 0, steps >= 1, hidden sizes >= 1, device=cuda without CUDA, ...).
Every problem is named as `<key> must be <what is allowed>, got <value>`.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Any

# Seeds torch.manual_seed accepts.
SEED_RANGE = (-(2**63), 2**64)
CHECKPOINT = "checkpoint.pt"


class ConfigError(ValueError):
    """A config value out of its allowed range; the message names key, value and what is allowed.

    train.py prints it as one line (no traceback) and exits with status 2.
    """


def validate(cfg: Any) -> None:
    """Raise ConfigError listing every out-of-range value of the composed config `cfg`."""
    problems: list[str] = []
    check = _Checker(problems)
    check.at_least("steps", cfg.steps, 1)
    if not SEED_RANGE[0] <= cfg.seed < SEED_RANGE[1]:
        problems.append(f"seed must be an integer in [-2**63, 2**64), got {cfg.seed}")
    check.at_least("threads", cfg.threads, 0, "(0 = torch's default)")
    check.at_least("log.every", cfg.log.every, 1)
    for key in ("hist_every", "figure_every", "val_every", "console_every"):
        check.at_least(f"log.{key}", cfg.log[key], 0, "(0 turns it off)")
    check.at_least("ckpt.every", cfg.ckpt.every, 0, "(0: only at the end and when stopped)")
    _check_optimizer(check, cfg.optimizer)
    _check_task(check, cfg.task)
    if cfg.resume is not None:
        run_dir = Path(cfg.resume).expanduser()
        if not (run_dir / CHECKPOINT).is_file():
            problems.append(
                f"resume must be a run dir holding {CHECKPOINT}, got {cfg.resume!r} "
                f"({'no ' + CHECKPOINT + ' in it' if run_dir.is_dir() else 'no such dir'})"
            )
    if not problems and value(cfg.device) == "cuda":
        import torch  # only here: the other checks answer without importing torch

        if not torch.cuda.is_available():
            problems.append(
                "device=cuda but CUDA is not available; use device=auto or device=cpu"
            )
    if problems:
        raise ConfigError("; ".join(problems))


def _check_optimizer(check: _Checker, opt: Any) -> None:
    """The optimizer's own ranges, by optimizer."""
    name = opt.name
    if name in ("sgd", "adam"):
        check.positive("optimizer.lr", opt.lr)
        check.at_least("optimizer.weight_decay", opt.weight_decay, 0.0)
    if name == "sgd":
        check.at_least("optimizer.momentum", opt.momentum, 0.0)
        check.at_least("optimizer.dampening", opt.dampening, 0.0)
        if opt.nesterov and (opt.momentum <= 0 or opt.dampening != 0):
            check.problems.append(
                "optimizer.nesterov=true needs optimizer.momentum > 0 and optimizer.dampening=0, "
                f"got momentum={opt.momentum}, dampening={opt.dampening}"
            )
    elif name == "adam":
        betas = list(opt.betas)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            check.problems.append(f"optimizer.betas must be two numbers in [0, 1), got {betas}")
        check.at_least("optimizer.eps", opt.eps, 0.0)
    elif name == "lbfgs":
        check.at_least("optimizer.history_size", opt.history_size, 1)
        check.at_least("optimizer.max_eval", opt.max_eval, 2, "(the line search's evaluations)")
    elif name in ("newton", "lm"):
        check.at_least("optimizer.max_tries", opt.max_tries, 1)
        check.at_least("optimizer.max_params", opt.max_params, 1)
        if opt.chunk_size is not None:
            check.at_least("optimizer.chunk_size", opt.chunk_size, 1)
        if opt.ftol is not None:
            check.at_least("optimizer.ftol", opt.ftol, 0.0, "(or null)")
        if name == "newton":
            check.at_least("optimizer.damping", opt.damping, 0.0)
            check.positive("optimizer.min_damping", opt.min_damping)
            if not opt.factor > 1:
                check.problems.append(f"optimizer.factor must be > 1, got {opt.factor}")
        else:
            check.positive("optimizer.damping", opt.damping)
            check.at_least("optimizer.max_jacobian_numel", opt.max_jacobian_numel, 1)
    check.at_least("optimizer.stop.patience", opt.stop.patience, 0, "(0 runs every step)")
    if opt.stop.rtol is not None:
        check.at_least("optimizer.stop.rtol", opt.stop.rtol, 0.0, "(or null)")


def _check_task(check: _Checker, task: Any) -> None:
    """The task's data and model sizes, by task."""
    name = task.name
    if name in ("poly3", "mlp"):
        check.at_least("task.n_points", task.n_points, 2 if name == "poly3" else 1)
        if not (math.isfinite(task.x_min) and math.isfinite(task.x_max)) or (
            not task.x_min < task.x_max
        ):
            check.problems.append(
                "task.x_min and task.x_max must be finite with task.x_min < task.x_max, "
                f"got x_min={task.x_min}, x_max={task.x_max}"
            )
    if name == "poly3":
        for key in ("a", "b", "c", "d"):
            if not math.isfinite(task.init[key]):
                check.problems.append(f"task.init.{key} must be finite, got {task.init[key]}")
    elif name == "mlp":
        check.at_least("task.n_val", task.n_val, 1)
        check.at_least("task.noise", task.noise, 0.0, "(the std of the target noise)")
        hidden = list(task.hidden)
        if any(h < 1 for h in hidden):
            check.problems.append(f"task.hidden sizes must be >= 1, got {hidden}")
    elif name == "cnn":
        check.at_least("task.n_train", task.n_train, 2)
        check.at_least("task.n_val", task.n_val, 1)
        if not 2 <= task.batch_size <= max(task.n_train, 2):
            check.problems.append(
                f"task.batch_size must be in [2, task.n_train={task.n_train}] (batch norm "
                f"needs 2 images), got {task.batch_size}"
            )
        check.at_least("task.noise", task.noise, 0.0, "(the std of the pixel noise)")
        channels = list(task.channels)
        if not channels or any(c < 1 for c in channels):
            check.problems.append(
                f"task.channels must be a non-empty list of sizes >= 1, got {channels}"
            )
        elif task.image_size < 1 or task.image_size % 2 ** len(channels):
            check.problems.append(
                f"task.image_size must be a positive multiple of 2**len(task.channels) = "
                f"{2 ** len(channels)} (one 2x2 pooling per block), got {task.image_size}"
            )


class _Checker:
    """Appends `<key> must be ..., got <value>` to `problems` for each failed range check."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems

    def at_least(self, key: str, got: float, low: float, note: str = "") -> None:
        # `not got >= low` also catches nan; a float bound also asks for a finite value.
        if not got >= low or (isinstance(got, float) and not math.isfinite(got)):
            self.problems.append(f"{key} must be >= {low:g}{' ' + note if note else ''}, got {got}")

    def positive(self, key: str, got: float) -> None:
        if not (got > 0 and math.isfinite(got)):
            self.problems.append(f"{key} must be > 0 (and finite), got {got}")


def value(option: Enum | str) -> str:
    """An enum option's string (plain strings, e.g. from a checkpoint's config, pass through)."""
    return option.value if isinstance(option, Enum) else option
