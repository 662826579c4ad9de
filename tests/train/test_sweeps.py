"""Sweeps: the experiment presets, the joblib and submitit launchers, torch threads per job."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.train.parallel import concurrent_jobs, cpu_cores, job_threads, limit_threads

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


def hydra_cfg(*overrides: str):
    """The config `python train.py OVERRIDES` composes, Hydra's own part included."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def sweep_jobs(cfg, *command_line: str) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper makes them from the preset's
    hydra.sweeper.params followed by the command line (whose keys win)."""
    params = [f"{key}={value}" for key, value in cfg.hydra.sweeper.params.items()]
    overrides = OverridesParser.create().parse_overrides([*params, *command_line])
    (batch,) = BasicSweeper.split_arguments(overrides, None)
    return batch


def test_compare_impls_sweeps_impl_for_the_chosen_task():
    cfg = hydra_cfg("task=mlp", "+experiment=compare_impls")
    assert cfg.hydra.mode.name == "MULTIRUN"  # -m is optional with a preset
    assert sweep_jobs(cfg) == [["impl=custom"], ["impl=builtin"]]
    # The task's own defaults are untouched by the preset.
    assert (cfg.task.name, cfg.optimizer.name, cfg.optimizer.lr, cfg.steps) == (
        "mlp", "adam", 0.01, 2000)
    # Job dirs, hence TensorBoard run names, say impl=..., not the preset's name.
    assert list(cfg.hydra.job.config.override_dirname.exclude_keys) == ["experiment"]
    # A sweep on the command line over the same key wins over the preset's.
    assert sweep_jobs(cfg, "impl=builtin") == [["impl=builtin"]]


def test_compare_tasks_sweeps_every_task_and_impl():
    cfg = hydra_cfg("+experiment=compare_tasks")
    jobs = sweep_jobs(cfg, "steps=100")
    assert jobs == [
        [f"task={task}", f"impl={impl}", "steps=100"]
        for task in ("poly3", "mlp", "cnn")
        for impl in ("custom", "builtin")
    ]
    assert list(cfg.hydra.job.config.override_dirname.exclude_keys) == ["experiment"]
    # Each job composes with its task's own optimizer.
    optimizers = {job[0]: hydra_cfg(*job).optimizer.name for job in jobs[::2]}
    assert optimizers == {"task=poly3": "gd", "task=mlp": "adam", "task=cnn": "adam"}


def test_joblib_launcher_composes_with_one_job_per_core_by_default():
    launcher = hydra_cfg("hydra/launcher=joblib", "+experiment=compare_impls").hydra.launcher
    assert launcher._target_ == JOBLIB
    assert launcher.n_jobs == -1
    assert concurrent_jobs(launcher, cpu_cores()) == cpu_cores()


def test_submitit_slurm_launcher_composes():
    cfg = hydra_cfg("hydra/launcher=submitit_slurm", "hydra.launcher.partition=cpu",
                    "hydra.launcher.cpus_per_task=2", "+experiment=compare_tasks")
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.partition, launcher.cpus_per_task, launcher.timeout_min) == ("cpu", 2, 60)
    assert launcher.submitit_folder == f"{cfg.hydra.sweep.dir}/.submitit/%j"
    assert concurrent_jobs(launcher, 2) == 1  # each job on its own allocation


@pytest.mark.parametrize(
    ("target", "n_jobs", "cores", "jobs"),
    [
        (JOBLIB, -1, 2, 2),
        (JOBLIB, -1, 8, 8),
        (JOBLIB, -2, 8, 7),
        (JOBLIB, -9, 8, 1),
        (JOBLIB, 3, 2, 3),
        (JOBLIB, None, 4, 1),
        ("hydra._internal.core_plugins.basic_launcher.BasicLauncher", None, 4, 1),
    ],
)
def test_concurrent_jobs(target, n_jobs, cores, jobs):
    launcher = OmegaConf.create({"_target_": target, "n_jobs": n_jobs})
    assert concurrent_jobs(launcher, cores) == jobs
    assert concurrent_jobs(None, cores) == 1


@pytest.mark.parametrize(
    ("threads", "jobs", "cores", "limited", "warns"),
    [
        (1, 1, 2, 1, False),
        (0, 1, 2, 0, False),  # alone: torch's default stays
        (4, 1, 2, 4, False),
        (1, 2, 2, 1, False),
        (0, 2, 2, 1, False),  # torch's default would be one thread per core
        (2, 2, 2, 1, True),
        (0, 2, 8, 4, False),
        (3, 2, 8, 3, False),
        (5, 2, 8, 4, True),
        (1, 4, 2, 1, True),  # more jobs than cores: they share, and say so
    ],
)
def test_limit_threads_keeps_jobs_times_threads_within_cores(
    threads, jobs, cores, limited, warns, caplog
):
    with caplog.at_level(logging.WARNING, logger="fitting.train.parallel"):
        assert limit_threads(threads, jobs, cores) == limited
    assert bool(caplog.records) == warns
    if jobs > 1 and jobs <= cores:
        assert jobs * limited <= cores


def test_job_threads_outside_hydra_is_threads():
    assert job_threads(3) == 3


def run_sweep(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`python train.py ARGS` from the repo root; its result and the process id."""
    proc = subprocess.Popen(
        [sys.executable, "train.py", *args], cwd=REPO, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert result.returncode == 0, err[-4000:]
    return result, proc.pid


def event_file_pid(job_dir: Path) -> int:
    """The id of the process that wrote the job's event file (events.out.tfevents.T.HOST.PID.N)."""
    (event_file,) = job_dir.glob("events.out.tfevents.*")
    return int(event_file.name.split(".")[-2])


@pytest.mark.slow
def test_compare_impls_preset_runs_on_joblib_in_worker_processes(tmp_path):
    mlp = ["task=mlp", "steps=5", "task.n_points=32", "task.hidden=[8]"]
    _, main_pid = run_sweep(
        "+experiment=compare_impls", *mlp, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path}",
    )
    rest = "steps=5,task.hidden=[8],task.n_points=32,task=mlp"
    job_dirs = sorted(p for p in tmp_path.iterdir() if (p / ".hydra").is_dir())
    assert [p.name for p in job_dirs] == [f"0_impl=custom,{rest}", f"1_impl=builtin,{rest}"]
    for job_dir, impl in zip(job_dirs, ["custom", "builtin"], strict=True):
        config = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
        assert (config.impl, config.task.name, config.optimizer.name) == (impl, "mlp", "adam")
        assert event_file_pid(job_dir) != main_pid  # a joblib worker ran it
    multirun = OmegaConf.load(tmp_path / "multirun.yaml")
    assert multirun.hydra.launcher._target_ == JOBLIB


@pytest.mark.slow
def test_submitit_local_runs_a_job_end_to_end(tmp_path):
    _, main_pid = run_sweep(
        "-m", "hydra/launcher=submitit_local", "steps=5", f"hydra.sweep.dir={tmp_path}"
    )
    job_dir = tmp_path / "0_steps=5"
    assert (job_dir / ".hydra" / "config.yaml").is_file()
    assert (job_dir / "fit_step000005.png").is_file()
    assert event_file_pid(job_dir) != main_pid  # submitit's own process ran it
    (submitit_job,) = (tmp_path / ".submitit").glob("[0-9]*")
    assert list(submitit_job.glob("*_result.pkl"))
    assert "final loss" in (job_dir / "train.log").read_text()
