"""Structured-config schemas of the app, registered in Hydra's ConfigStore on import.

These dataclasses hold the types and the defaults, so a wrong type, an unknown key or an
unknown enum option fails at composition; the YAML files in `conf/` hold only what an option
or a task changes. The schemas of the options of `task=` and `optimizer=` come with them
(fitting.tasks.TASKS, fitting.optim.OPTIMIZERS); the top-level keys are here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fitting.optim import OPTIMIZERS
from fitting.tasks import TASKS

# The checkout that holds train.py, conf/ and fitting/: runs go to its outputs/ whatever the cwd.
REPO_ROOT = Path(__file__).resolve().parents[1]


class Impl(str, Enum):
    custom = "custom"
    builtin = "builtin"

    def __str__(self) -> str:
        # The value, so `${impl}` interpolated into a string key (ops.*) reads `custom`.
        return self.value


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class DType(Enum):
    float32 = "float32"
    float64 = "float64"


@dataclass
class LogConfig:
    every: int = 1  # scalars (loss/train, time, memory, norms) every N steps
    hist_every: int = 100  # weight/gradient histograms (mlp, cnn)
    figure_every: int = 1000  # figure of the fit; one is always made at the end
    val_every: int = 100  # loss/val, for tasks with a validation set
    console_every: int = 0  # a console/log line every N steps; 0 = 10 lines per run
    # memory/peak_bytes, a step's tensor peak, on the first logged step from each multiple of N
    # (0: off). Opt-in: it runs the step under the profiler, which costs milliseconds.
    memory_every: int = 0


@dataclass
class OpsConfig:
    """Which function runs each op slot: custom, builtin, <module>:<name> (models.ops.choice)
    or a function with arguments in Hydra's form ({_target_: ..., _partial_: true, ...}); each
    follows `impl` unless given, so impl= flips all and ops.<slot>= one."""

    linear: Any = "${impl}"
    activation: Any = "${impl}"
    conv_bn: Any = "${impl}"
    legendre_p3: Any = "${impl}"


@dataclass
class CkptConfig:
    # checkpoint.pt every N steps (0: only at the end and when the run is stopped). A write took
    # ~2 ms here (poly3 or mlp; mostly the file system): ~2% of 500 of poly3's 0.2 ms steps.
    every: int = 500


# What a non-finite loss or gradient does: stop the run cleanly (checkpoint, message, non-zero
# exit) or raise FloatingPointError with its traceback (also after the checkpoint).
OnNonFinite = Enum("OnNonFinite", {"stop": "stop", "raise": "raise"})


@dataclass
class Config:
    task: Any = MISSING  # the schema of TASKS[name], from the `task` group
    optimizer: Any = MISSING  # the schema of OPTIMIZERS[name], from the `optimizer` group
    impl: Impl = Impl.custom
    ops: OpsConfig = field(default_factory=OpsConfig)
    steps: int = 2000
    seed: int = 0
    device: Device = Device.auto
    dtype: DType = DType.float32
    # CPU threads for torch's ops; 0 keeps torch's default (one per core). One by default:
    # on a busy 2-core machine two threads made the cnn step ~25x slower (each op's threads
    # wait for one another); on a quiet one they were ~1.4x faster (threads=0).
    threads: int = 1
    # Run the model's forward under torch.compile (inductor). newton and lm still take their
    # derivatives of the eager model (torch.func transforms do not go through compiled code).
    compile: bool = False
    log: LogConfig = field(default_factory=LogConfig)
    ckpt: CkptConfig = field(default_factory=CkptConfig)
    on_nonfinite: OnNonFinite = OnNonFinite.stop
    # torch.use_deterministic_algorithms(True) (and a cuBLAS workspace setting on CUDA): CUDA
    # runs become repeatable or fail on an op without a deterministic kernel. CPU runs are
    # repeatable without it.
    deterministic: bool = False
    # torch.profiler over a few steps after a warm-up: a Chrome trace (profile.pt.trace.json, opens
    # in Perfetto) in the run dir and the top ops by self CPU time in the run's log.
    profile: bool = False
    # A run dir to continue from its checkpoint.pt, in that dir (python train.py resume=DIR).
    resume: str | None = None


def schemas() -> dict[str, type]:
    """The option schemas by ConfigStore name; each conf/<group>/<name>.yaml names its own."""
    out = {f"schema_task_{name}": option.schema for name, option in TASKS.items()}
    out.update({f"schema_optimizer_{name}": o.schema for name, o in OPTIMIZERS.items()})
    return out


def typed_config(plain: dict[str, Any]) -> DictConfig:
    """A plain config (a checkpoint's) as the typed config Hydra composes: the schemas of its
    task and optimizer, enums as enums, unknown keys and wrong types refused."""
    typed = OmegaConf.structured(Config)
    typed.task = OmegaConf.structured(TASKS[plain["task"]["name"]].schema)
    typed.optimizer = OmegaConf.structured(OPTIMIZERS[plain["optimizer"]["name"]].schema)
    return OmegaConf.merge(typed, plain)


def run_dir(resume: str | None, new: str) -> str:
    """hydra.run.dir: the dir of the run to continue (resume=DIR, made absolute), else `new`.

    A DIR without checkpoint.pt gets `new` too: the config error is logged there, and no dir
    is made at a mistyped path."""
    return str(Path(resume).expanduser().resolve()) if _resumable(resume) else new


def config_subdir(resume: str | None) -> str | None:
    """hydra.output_subdir: .hydra, or none when resuming (the run's own .hydra/ stays as is)."""
    return None if _resumable(resume) else ".hydra"


def unescaped(dirname: str) -> str:
    """hydra.job.override_dirname without the backslashes Hydra puts before special characters
    (`ops.activation=my_ops\\:my_relu`): a job dir name a shell and TensorBoard show as typed."""
    return re.sub(r"\\(.)", r"\1", dirname)


def _resumable(resume: str | None) -> bool:
    """Whether `resume` names a dir that holds a checkpoint.pt."""
    return bool(resume) and (Path(resume).expanduser() / "checkpoint.pt").is_file()


def register_configs() -> None:
    """Store the schemas (the YAML files in conf/ extend them) and the resolvers."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    # Schemas are stored outside any group so that --help and the "available options" of an
    # error list only the YAML options; each YAML file names its schema in its defaults list.
    for name, node in schemas().items():
        cs.store(name=name, node=node)
    if not OmegaConf.has_resolver("repo_root"):
        OmegaConf.register_new_resolver("repo_root", lambda: str(REPO_ROOT))
    if not OmegaConf.has_resolver("run_dir"):
        OmegaConf.register_new_resolver("run_dir", run_dir)
    if not OmegaConf.has_resolver("unescaped"):
        OmegaConf.register_new_resolver("unescaped", unescaped)
    if not OmegaConf.has_resolver("config_subdir"):
        OmegaConf.register_new_resolver("config_subdir", config_subdir)


register_configs()
