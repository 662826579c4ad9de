"""Structured-config schemas of the app, registered in Hydra's ConfigStore on import.

The YAML files in `conf/` hold the values; these dataclasses hold the types, so a wrong type,
an unknown key or an unknown enum option fails at composition with Hydra's own message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

# The checkout that holds train.py, conf/ and fitting/: runs go to its outputs/ whatever the cwd.
REPO_ROOT = Path(__file__).resolve().parents[1]


class Impl(Enum):
    custom = "custom"
    builtin = "builtin"


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class DType(Enum):
    float32 = "float32"
    float64 = "float64"


class Target(Enum):
    """1-D target functions of the mlp task."""

    sin = "sin"
    cos = "cos"
    tanh = "tanh"
    abs = "abs"
    square = "square"
    gauss = "gauss"


@dataclass
class LogConfig:
    every: int = 1  # scalars (loss/train, time, memory, norms) every N steps
    hist_every: int = 100  # weight/gradient histograms (mlp, cnn)
    figure_every: int = 1000  # figure of the fit; one is always made at the end
    val_every: int = 100  # loss/val, for tasks with a validation set
    console_every: int = 0  # a console/log line every N steps; 0 = 10 lines per run


@dataclass
class CkptConfig:
    # checkpoint.pt every N steps (0: only at the end and when the run is stopped). A write took
    # ~2 ms here (poly3 or mlp; mostly the file system): ~2% of 500 of poly3's 0.2 ms steps.
    every: int = 500


# What a non-finite loss or gradient does: stop the run cleanly (checkpoint, message, non-zero
# exit) or raise FloatingPointError with its traceback (also after the checkpoint).
OnNonFinite = Enum("OnNonFinite", {"stop": "stop", "raise": "raise"})


@dataclass
class StopConfig:
    """Stop before `steps` once the fit has converged: `patience` consecutive steps changed the
    loss by no more than `rtol`·|loss|. `steps` stays the budget; patience=0 runs every step."""

    patience: int = 0
    rtol: float | None = None  # None: 4 eps of the dtype, i.e. no change beyond rounding


@dataclass
class SGDConfig:
    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    stop: StopConfig = field(default_factory=StopConfig)


@dataclass
class AdamConfig:
    name: str = "adam"
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    stop: StopConfig = field(default_factory=StopConfig)


# lbfgs, newton and lm take no learning rate, but each task sets optimizer.lr (for sgd/adam)
# after the optimizer is chosen, so their schemas accept the key and the optimizers ignore it.
# They stop by default once converged (stop.patience=3), which keeps a task's 2000-step budget
# from turning into 2000 steps of rounding noise.


@dataclass
class LBFGSConfig:
    name: str = "lbfgs"
    lr: float | None = None  # not used: the strong-Wolfe line search picks each step length
    history_size: int = 100
    max_eval: int = 25  # loss+gradient evaluations per iteration (the line search's budget)
    stop: StopConfig = field(default_factory=lambda: StopConfig(patience=3))


@dataclass
class NewtonConfig:
    name: str = "newton"
    lr: float | None = None  # not used: damping, not a learning rate, sets the step
    damping: float = 0.0  # initial λ; 0: pure Newton steps while the Hessian allows them
    min_damping: float = 1e-6
    factor: float = 10.0
    max_tries: int = 20
    max_params: int = 1000  # the n×n Hessian's n; more is a config error
    chunk_size: int | None = 32  # Hessian rows per reverse-over-reverse pass
    ftol: float | None = None  # a rise of the loss within ftol·|loss| counts as none
    stop: StopConfig = field(default_factory=lambda: StopConfig(patience=3))


class LMScaling(Enum):
    marquardt = "marquardt"
    levenberg = "levenberg"


@dataclass
class LMConfig:
    name: str = "lm"
    lr: float | None = None  # not used: damping, not a learning rate, sets the step
    damping: float = 1e-3  # initial μ
    scaling: LMScaling = LMScaling.marquardt
    max_tries: int = 10
    # JᵀJ is n×n and each try solves it: 4353 parameters (the default mlp) took ~2 s per step.
    max_params: int = 1000
    max_jacobian_numel: int = 50_000_000
    chunk_size: int = 64  # Jacobian columns per forward-mode pass
    ftol: float | None = None  # a change of Σr² within ftol·Σr² is accepted as no change
    stop: StopConfig = field(default_factory=lambda: StopConfig(patience=3))


@dataclass
class Poly3Init:
    a: float = 0.0
    b: float = -1.0
    c: float = 0.0
    d: float = 0.3


@dataclass
class Poly3Config:
    name: str = "poly3"
    n_points: int = 2000
    x_min: float = -math.pi
    x_max: float = math.pi
    init: Poly3Init = field(default_factory=Poly3Init)


@dataclass
class MLPConfig:
    name: str = "mlp"
    target: Target = Target.sin
    x_min: float = -math.pi
    x_max: float = math.pi
    n_points: int = 256
    noise: float = 0.0  # std of Gaussian noise added to the training targets
    n_val: int = 1000  # noiseless points on the same range for loss/val
    hidden: list[int] = field(default_factory=lambda: [64, 64])


@dataclass
class CNNConfig:
    name: str = "cnn"
    n_train: int = 8192
    n_val: int = 512
    batch_size: int = 64
    image_size: int = 32
    noise: float = 0.1  # std of pixel noise
    channels: list[int] = field(default_factory=lambda: [8, 16])


@dataclass
class Config:
    task: Any = MISSING  # one of the task schemas, from the `task` group
    optimizer: Any = MISSING  # one of the optimizer schemas, from the `optimizer` group
    impl: Impl = Impl.custom
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
    # A run dir to continue from its checkpoint.pt, in that dir (python train.py resume=DIR).
    resume: str | None = None


SCHEMAS: dict[str, type] = {
    "schema_task_poly3": Poly3Config,
    "schema_task_mlp": MLPConfig,
    "schema_task_cnn": CNNConfig,
    "schema_optimizer_sgd": SGDConfig,
    "schema_optimizer_adam": AdamConfig,
    "schema_optimizer_lbfgs": LBFGSConfig,
    "schema_optimizer_newton": NewtonConfig,
    "schema_optimizer_lm": LMConfig,
}


def run_dir(resume: str | None, new: str) -> str:
    """hydra.run.dir: the dir of the run to continue (resume=DIR, made absolute), else `new`.

    A DIR without checkpoint.pt gets `new` too: the config error is logged there, and no dir
    is made at a mistyped path."""
    return str(Path(resume).expanduser().resolve()) if _resumable(resume) else new


def config_subdir(resume: str | None) -> str | None:
    """hydra.output_subdir: .hydra, or none when resuming (the run's own .hydra/ stays as is)."""
    return None if _resumable(resume) else ".hydra"


def _resumable(resume: str | None) -> bool:
    """Whether `resume` names a dir that holds a checkpoint.pt."""
    return bool(resume) and (Path(resume).expanduser() / "checkpoint.pt").is_file()


def register_configs() -> None:
    """Store the schemas (the YAML files in conf/ extend them) and the resolvers."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    # Schemas are stored outside any group so that --help and the "available options" of an
    # error list only the YAML options; each YAML file names its schema in its defaults list.
    for name, node in SCHEMAS.items():
        cs.store(name=name, node=node)
    if not OmegaConf.has_resolver("repo_root"):
        OmegaConf.register_new_resolver("repo_root", lambda: str(REPO_ROOT))
    if not OmegaConf.has_resolver("run_dir"):
        OmegaConf.register_new_resolver("run_dir", run_dir)
    if not OmegaConf.has_resolver("config_subdir"):
        OmegaConf.register_new_resolver("config_subdir", config_subdir)


register_configs()
