"""`python train.py` as a user runs it: config errors, --help, a sweep's resume, and a real
process stopped by SIGTERM that resumes bit-identical."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.train_cli import REPO, TRAIN, user_env
from tests.train.helpers import go, same_weights


@pytest.mark.parametrize("args, message", [
    (["steps=0"], "steps must be >= 1, got 0"),
    (["+foo=1"], "unknown key foo"),
    (["task=mlp", "task.hidden=[64,0]"], "task.hidden must be"),
    (["ops.legendre_p3=no_such_module:fn"], "No module named"),
    (["task=mlp", "task.target=" + "x" * 200_000], "task.target must be"),
    (["task.n_points=1000000000000"], "the task does not fit in memory ("),
    (["task=mlp", "optimizer.lr=1e309"], "optimizer.lr must be a finite number, got inf"),
    (["optimizer.lr=nan"], "optimizer.lr must be a finite number, got nan"),
    (["limit.first_call_s=0"], "limit.first_call_s must be >= 0.001, got 0"),
])
def test_a_config_error_is_one_line_exit_2_and_leaves_no_run_dir(args, message, tmp_path,
                                                                  train_cli):
    done = train_cli(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    assert done.stderr.startswith("config error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1 and len(done.stderr) < 400  # a huge value is cut
    assert not (tmp_path / "run").exists()


def test_hydras_own_composition_errors_leave_no_run_dir(tmp_path, train_cli):
    done = train_cli("optimizer=lbfgs", "optimizer.lr=1", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode != 0 and "optimizer.lr" in done.stderr  # lbfgs takes no lr
    assert not (tmp_path / "run").exists()


def test_resume_in_a_sweep_is_one_line(train_cli):
    done = train_cli("-m", "resume=outputs/some/run")
    assert (done.returncode, done.stderr.count("resume=")) == (2, 1)


def test_help_lists_the_choices_and_keys(train_cli):
    done = train_cli("--help")
    assert done.returncode == 0
    for text in ("task=cnn|mlp|poly3", "optimizer=adam|gd|lbfgs|lm|newton|sgd",
                 "+experiment=compare_impls|compare_tasks", "log.memory_every", "ckpt.every",
                 "stop.patience", "resume=<run dir>", "ops.<slot>=", "limit.first_call_s"):
        assert text in done.stdout
    assert "task_optimizer=" not in done.stdout


def test_sigterm_checkpoints_and_the_resumed_run_ends_bit_identical(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, TRAIN, "steps=1000000", "ckpt.every=0", f"hydra.run.dir={out}"],
        cwd=REPO, env=user_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("events.out.tfevents.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # some steps into the run
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    step = json.loads((out / "results.json").read_text())["step"]
    assert stderr.strip().endswith(f"resume with: python train.py resume={out}")
    assert f"interrupted by SIGTERM after {step} of 1000000 steps" in stderr
    assert not (out / "run.lock").exists() and step > 0
    resumed = go(out, f"resume={out}", f"steps={step + 20}")
    assert resumed == go(tmp_path / "whole", f"steps={step + 20}")
    assert same_weights(out, tmp_path / "whole")
    assert os.path.getsize(out / ".hydra" / "overrides.yaml") > 0


def test_a_sweeps_jobs_leave_the_tensorboard_line_to_its_end(tmp_path, train_cli):
    done = train_cli("-m", "steps=3", "impl=custom,builtin", f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 0 and done.stdout.count("run dir: ") == 2
    table = [line for line in done.stdout.splitlines() if line.endswith("  completed")]
    assert "Result:" not in done.stdout and len(table) == 2  # the table
    assert done.stdout.count("tensorboard --logdir") == 1
    assert done.stdout.rstrip().endswith(f"tensorboard --logdir {tmp_path}")
