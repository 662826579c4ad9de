"""The run-level keys, typed, with their defaults (ConfigStore's `base_config`), their range
checks and conf/config.yaml's resolvers. A task's and an optimizer's keys are their classes'."""

import math
import os
import re
from dataclasses import dataclass, field, make_dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import ConfigKeyError

from fitting.opcheck.boundary import FIRST_LIMIT_S, LIMIT_S
from fitting.slots import SLOTS

REPO_ROOT = Path(__file__).resolve().parents[1]  # runs go to its outputs/, whatever the cwd
CHECKPOINT = "checkpoint.pt"
MAX_STEPS = 2**63 - 1  # a step TensorBoard can hold (int64)


class ConfigError(ValueError):
    """A config the app refuses: train.py prints `config error: <message>` and exits 2."""


def short(value: Any, limit: int = 80) -> str:
    """A value or an error as at most `limit` characters of one line."""
    text = " ".join((str(value) if isinstance(value, BaseException) else repr(value)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


CHOICES = {"impl": ("custom", "builtin"), "device": ("auto", "cpu", "cuda"),
           "dtype": ("float32", "float64"), "on_nonfinite": ("stop", "raise")}


# ops.<slot>: the choice each op slot runs (fitting/slots.py); each follows `impl` unless given.
Ops = make_dataclass("Ops", [(slot, Any, field(default="${impl}")) for slot in SLOTS])


@dataclass
class Log:
    every: int = 1  # scalars every N steps (only logged steps read the loss off the device)
    hist_every: int = 100  # weight and gradient histograms
    figure_every: int = 1000  # the figure of the fit; one is always made at the end
    val_every: int = 100  # loss/val, for tasks with a validation set
    console_every: int = 0  # a "step N loss X" line every N steps (0: the progress lines only)
    memory_every: int = 0  # memory/peak_bytes, a step's tensor peak (0: off; costs ms a step)


@dataclass
class Ckpt:
    every: int = 500  # checkpoint.pt every N steps; also at the end and when stopped


@dataclass
class Stop:
    patience: int = 0  # stop once the loss changed by <= rtol·|loss| N steps in a row (0: off)
    rtol: float | None = None  # None: 4 ulps of the dtype


@dataclass
class Config:
    task: Any = MISSING  # {_target_: fitting.tasks.<Task>, ...} from conf/task
    optimizer: Any = MISSING  # {_target_: ..., _partial_: true, ...} from conf/optimizer
    scheduler: Any = None  # {_target_: torch.optim.lr_scheduler..., _partial_: true}; None: none
    impl: str = "custom"  # the default of every op slot: custom (ours) or builtin (the twin)
    ops: Ops = field(default_factory=Ops)
    steps: int = 2000
    seed: int = 0
    device: str = "auto"  # auto: cuda if available
    dtype: str = "float32"
    threads: int = 1  # 0: torch's default; 2 made the cnn step ~25x slower on a busy 2-core box
    compile: bool = False  # the model's forward under torch.compile
    deterministic: bool = False  # torch.use_deterministic_algorithms (CUDA; CPU already is)
    profile: bool = False  # a torch.profiler trace of a few steps in the run dir
    log: Log = field(default_factory=Log)
    ckpt: Ckpt = field(default_factory=Ckpt)
    stop: Stop = field(default_factory=Stop)
    op_limit_s: float = LIMIT_S  # a user's op's call in its pre-check may take this long
    op_first_limit_s: float = FIRST_LIMIT_S  # and its first call (which may compile) this long
    on_nonfinite: str = "stop"  # stop: checkpoint, one line, exit 1; raise: also a traceback
    resume: str | None = None  # a run dir to continue from its checkpoint.pt, in that dir


def check(cfg: Any, pair: str) -> None:
    """ConfigError naming the first run-level key unknown, unset or out of range."""
    given = OmegaConf.to_container(cfg, resolve=False)
    try:  # the task's and optimizer's keys are their classes' to check
        OmegaConf.merge(Config, {k: v for k, v in given.items() if k not in ("task", "optimizer")})
    except ConfigKeyError as err:
        raise ConfigError(f"unknown key {err.full_key} (added with +?); python train.py --help "
                          "lists the keys") from None
    for key, allowed in CHOICES.items():
        if cfg[key] not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {cfg[key]!r}")
    least = {"steps": 1, "threads": 0, "log.every": 1, "ckpt.every": 0, "stop.patience": 0,
             "stop.rtol": 0, "op_limit_s": 1e-3, "op_first_limit_s": 1e-3,
             **{f"log.{k}_every": 0 for k in ("hist", "figure", "val", "console", "memory")}}
    for key, low in least.items():
        if (value := OmegaConf.select(cfg, key)) is not None and not value >= low:
            raise ConfigError(f"{key} must be >= {low}, got {value}")
    most = {"steps": (MAX_STEPS, "a step TensorBoard holds"),  # more threads can crash torch
            "threads": (os.cpu_count() or 1, "this machine's cores")}
    for key, (high, why) in most.items():
        if cfg[key] > high:
            raise ConfigError(f"{key} must be <= {high} ({why}), got {cfg[key]}")
    if not -(2**63) <= cfg.seed < 2**64:
        raise ConfigError(f"seed must be in [-2**63, 2**64), got {cfg.seed}")
    for key in (k for k in cfg.optimizer if OmegaConf.is_missing(cfg.optimizer, k)):
        raise ConfigError(f"optimizer.{key} is not set for this task and optimizer: add conf/"
                          f"task_optimizer/{pair}.yaml ({key}: ...) or give optimizer.{key}=")
    for key, value in cfg.optimizer.items():  # an lr of 1e309 is inf to YAML: no step is right
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"optimizer.{key} must be a finite number, got {value}")
    import torch  # here: the other checks answer before torch is imported

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available; use device=auto or cpu")


def register() -> None:
    """Store the schema and the resolvers conf/config.yaml uses: call it before Hydra composes."""
    ConfigStore.instance().store(name="base_config", node=Config)
    resolvers = {
        "repo_root": lambda: str(REPO_ROOT),
        # hydra.run.dir: resume=DIR runs in DIR (a dir: fitting.rundir decides), else a new dir
        "run_dir": lambda resume, new: str(Path(resume).expanduser().resolve())
        if resume and os.path.isdir(os.path.expanduser(resume)) else new,  # no PermissionError
        # --help's choices: the names of conf/<group>/*.yaml
        "options": lambda group: "|".join(
            sorted(p.stem for p in (REPO_ROOT / "conf" / group).glob("*.yaml"))),
        "slots": lambda: ", ".join(SLOTS),  # --help's op slots: the registry's
        # job dir names as typed, without Hydra's escapes (my_ops\:relu)
        "unescaped": lambda name: re.sub(r"\\(.)", r"\1", name)}
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def misspelled(args: list[str]) -> str | None:
    """A run-level key the config has not, with the closest it has (Hydra's error offers only
    `+step=`): `unknown key step: did you mean steps?`. task.* and optimizer.* are Hydra's."""
    for key in (a.partition("=")[0] for a in args if "=" in a and a[0] not in "+~-"):
        node, done = OmegaConf.structured(Config), ""
        for part in key.split("."):
            if part not in (keys := [str(k) for k in node.keys()]):
                close = get_close_matches(part, keys, n=1)
                return f"unknown key {key}" + (f": did you mean {done}{close[0]}?" if close else
                                               " (python train.py --help lists the keys)")
            if OmegaConf.is_missing(node, part) or not OmegaConf.is_dict(node[part]):
                break
            node, done = node[part], f"{done}{part}."
    return None
