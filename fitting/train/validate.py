"""One pass over a composed config that rejects out-of-range values before anything is built.

Hydra already rejects unknown keys, wrong types and unknown options while composing; this checks
what types cannot say (steps >= 1, lr > 0, hidden sizes >= 1, device=cuda without CUDA, ...):
the top-level keys and those every optimizer has (lr, stop) here, each option's own keys in its
spec (fitting.optim.OPTIMIZERS, fitting.tasks.TASKS). Every problem is named as
`<key> must be <what is allowed>, got <value>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fitting.checks import Checker, ConfigError
from fitting.optim import OPTIMIZERS
from fitting.tasks import TASKS

__all__ = ["CHECKPOINT", "ConfigError", "resume_problem", "validate"]

# Seeds torch.manual_seed accepts.
SEED_RANGE = (-(2**63), 2**64)
CHECKPOINT = "checkpoint.pt"


def validate(cfg: Any) -> None:
    """Raise ConfigError listing every unknown key and out-of-range value of the composed
    config `cfg`."""
    c = Checker()
    known_names = cfg.task.name in TASKS and cfg.optimizer.name in OPTIMIZERS
    unknown = unknown_keys(cfg) if known_names else []
    if unknown:
        raise ConfigError(
            f"unknown key {', '.join(unknown)} (added with +?): the schema has no such key, so "
            "the run could not be resumed; check the spelling (python train.py --help lists "
            "the keys)"
        )
    c.at_least("steps", cfg.steps, 1)
    if not SEED_RANGE[0] <= cfg.seed < SEED_RANGE[1]:
        c.problem(f"seed must be an integer in [-2**63, 2**64), got {cfg.seed}")
    c.at_least("threads", cfg.threads, 0, "(0 = torch's default)")
    c.at_least("log.every", cfg.log.every, 1)
    for key in ("hist_every", "figure_every", "val_every", "console_every", "memory_every"):
        c.at_least(f"log.{key}", getattr(cfg.log, key), 0, "(0 turns it off)")
    c.at_least("ckpt.every", cfg.ckpt.every, 0, "(0: only at the end and when stopped)")
    _check_optimizer(c.under("optimizer"), cfg.optimizer)
    _check_option(c.under("task"), cfg.task, TASKS)
    if cfg.resume is not None:
        problem = resume_problem(cfg.resume)
        if problem:
            c.problem(problem)
    if not c.problems and cfg.device.value == "cuda":
        import torch  # only here: the other checks answer without importing torch

        if not torch.cuda.is_available():
            c.problem("device=cuda but CUDA is not available; use device=auto or device=cpu")
    c.raise_if_any()


def unknown_keys(cfg: Any) -> list[str]:
    """The keys of `cfg` that its schema (fitting.config.Config with the schemas of its task and
    optimizer) does not have, as dotted paths: what `+key=` can add past Hydra's checks."""
    from omegaconf import OmegaConf

    from fitting.config import Config

    schema = OmegaConf.structured(Config)
    schema.task = OmegaConf.structured(TASKS[cfg.task.name].schema)
    schema.optimizer = OmegaConf.structured(OPTIMIZERS[cfg.optimizer.name].schema)
    return _extra(OmegaConf.to_container(cfg, resolve=False),
                  OmegaConf.to_container(schema, resolve=False), "")


def _extra(given: Any, known: Any, prefix: str) -> list[str]:
    """Dotted keys in the dict `given` that the dict `known` lacks (ops.* take any value)."""
    if not isinstance(given, dict) or not isinstance(known, dict) or prefix == "ops.":
        return []
    out = []
    for key, value in given.items():
        if key not in known:
            out.append(prefix + str(key))
        else:
            out += _extra(value, known[key], f"{prefix}{key}.")
    return out


def resume_problem(resume: str) -> str | None:
    """What is wrong with resume=`resume` (no dir, no checkpoint in it), or None."""
    run_dir = Path(resume).expanduser()
    if (run_dir / CHECKPOINT).is_file():
        return None
    why = f"no {CHECKPOINT} in it" if run_dir.is_dir() else "no such dir"
    return f"resume must be a run dir holding {CHECKPOINT}, got {resume!r} ({why})"


def _check_optimizer(c: Checker, opt: Any) -> None:
    """optimizer.lr as the optimizer takes it (or refuses it), optimizer.stop, then its own."""
    spec = OPTIMIZERS.get(opt.name)
    if spec is not None and spec.takes_lr:
        c.positive("lr", opt.lr)
    elif spec is not None and opt.lr is not None:
        no_lr = [name for name, s in OPTIMIZERS.items() if not s.takes_lr]
        c.problem(
            f"{c.key('lr')} must not be set for optimizer={opt.name}: "
            f"{', '.join(no_lr[:-1])} and {no_lr[-1]} take no learning rate, got {opt.lr}"
        )
    c.at_least("stop.patience", opt.stop.patience, 0, "(0 runs every step)")
    if opt.stop.rtol is not None:
        c.at_least("stop.rtol", opt.stop.rtol, 0.0, "(or null)")
    _check_option(c, opt, OPTIMIZERS)


def _check_option(c: Checker, cfg: Any, specs: dict[str, Any]) -> None:
    """The checks of the spec named `cfg.name`, or the problem that there is none."""
    spec = specs.get(cfg.name)
    if spec is None:
        c.problem(f"{c.key('name')} must be one of {', '.join(specs)}, got {cfg.name!r}")
    else:
        spec.check(cfg, c)
