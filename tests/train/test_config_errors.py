"""Every class of wrong override through `python train.py`: non-zero exit, one clear message
naming key, value and what is allowed, no traceback; a bug still shows its traceback."""

from __future__ import annotations

import pytest
import torch

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.train.validate import ConfigError, validate
from tests.helpers.app_config import make_cfg

# Composition errors (an unknown key, a wrong type, an unknown option): one line naming the key,
# exit status 2, before the run dir is made.
COMPOSE_ERRORS = [
    (["task=nope"], "config error: task=nope is not an option of task; choose one of cnn, mlp, "
                    "poly3"),
    (["optimizer=nope"], "config error: optimizer=nope is not an option of optimizer; choose one "
                         "of adam, gd, lbfgs, lm, newton, sgd"),
    (["impl=fast"], "Invalid value 'fast', expected one of [custom, builtin]"),
    (["on_nonfinite=maybe"], "Invalid value 'maybe', expected one of [stop, raise]"),
    (["steps=1.5"], "config error: steps=1.5: not a valid integer"),
    (["seed=abc"], "config error: seed=abc: not a valid integer"),
    (["task=mlp", "task.hidden=64"], "task.hidden"),
    (["stepz=3"], "config error: unknown key stepz; check its spelling"),
]
# Out-of-range values: fitting.train.validate's message, exit status 2.
VALUE_ERRORS = [
    (["optimizer.lr=0"], "config error: optimizer.lr must be > 0 (and finite), got 0.0"),
    (["optimizer=adam", "optimizer.lr=-1e-3"], "optimizer.lr must be > 0 (and finite), got -0.001"),
    (["steps=0"], "config error: steps must be >= 1, got 0"),
    (["task.n_points=1"], "task.n_points must be >= 2, got 1"),
    (["task=mlp", "task.hidden=[8,0]"], "task.hidden sizes must be >= 1, got [8, 0]"),
    (["task=cnn", "task.noise=-0.1"], "task.noise must be >= 0 (the std of the pixel noise), got -0.1"),
    (["task=cnn", "task.batch_size=1"], "task.batch_size must be in [2, task.n_train=8192]"),
    (["log.every=0", "ckpt.every=-1"],
     "log.every must be >= 1, got 0; ckpt.every must be >= 0 (0: only at the end and when "
     "stopped), got -1"),
    (["resume=/nonexistent/run"],
     "resume must be a run dir holding checkpoint.pt, got '/nonexistent/run' (no such dir)"),
    # A key the chosen option does not use is refused, not ignored.
    (["optimizer=lbfgs", "optimizer.lr=1"],
     "config error: optimizer.lr must not be set for optimizer=lbfgs: lbfgs, newton and lm "
     "take no learning rate, got 1.0"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "message"), COMPOSE_ERRORS + VALUE_ERRORS)
def test_bad_override_exits_with_one_clear_message(overrides, message, tmp_path, train_cli):
    run_dir = tmp_path / "run"
    proc = train_cli(*overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2
    assert proc.stderr.startswith("config error: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1  # one line on stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    if (overrides, message) in VALUE_ERRORS:
        # The same line in the job's log; nothing was trained.
        assert message in (run_dir / "train.log").read_text()
        assert not list(run_dir.glob("events.out.tfevents.*"))
    else:
        assert not run_dir.exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
def test_cuda_without_cuda(tmp_path, train_cli):
    proc = train_cli("device=cuda", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr == (
        "config error: device=cuda but CUDA is not available; use device=auto or device=cpu\n"
    )


@pytest.mark.slow
def test_a_bad_job_of_a_sweep_fails_alone(tmp_path, train_cli):
    proc = train_cli("-m", "steps=0,3", "log.figure_every=0", f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 1
    assert "Error executing job with overrides: ['steps=0', 'log.figure_every=0']" in proc.stderr
    assert "config error: steps must be >= 1, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    good = tmp_path / "1_log.figure_every=0,steps=3"
    assert (good / "checkpoint.pt").exists()  # the other job ran
    assert "steps must be >= 1" in (tmp_path / "0_log.figure_every=0,steps=0" / "train.log").read_text()


@pytest.mark.slow
def test_a_bug_still_shows_its_traceback(tmp_path, train_cli, monkeypatch):
    def broken(cfg, out):
        raise KeyError("a bug")

    monkeypatch.setattr("fitting.train.run.run", broken)
    proc = train_cli(f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "KeyError: 'a bug'" in proc.stderr


# --- validate() itself, in-process: each class of range error, and no false alarms ---------


@pytest.mark.parametrize("task", ["poly3", "mlp", "cnn"])
@pytest.mark.parametrize("optimizer", ["gd", "sgd", "adam", "lbfgs", "newton", "lm"])
def test_the_defaults_are_valid(task, optimizer):
    validate(make_cfg(f"task={task}", f"optimizer={optimizer}"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optimizer.lr=nan"], "optimizer.lr must be > 0 (and finite), got nan"),
        (["optimizer.lr=inf"], "optimizer.lr must be > 0 (and finite), got inf"),
        (["optimizer=sgd", "optimizer.momentum=-0.5"], "optimizer.momentum must be >= 0, got -0.5"),
        (["optimizer=sgd", "optimizer.nesterov=true"],
         "optimizer.nesterov=true needs optimizer.momentum > 0"),
        (["optimizer=adam", "optimizer.betas=[0.9,1.0]"], "optimizer.betas must be two numbers in [0, 1)"),
        (["optimizer=lbfgs", "optimizer.history_size=0"], "optimizer.history_size must be >= 1"),
        (["optimizer=newton", "optimizer.factor=1"], "optimizer.factor must be > 1, got 1.0"),
        (["optimizer=lm", "optimizer.damping=0"], "optimizer.damping must be > 0 (and finite)"),
        (["optimizer=lm", "optimizer.stop.rtol=-1"], "optimizer.stop.rtol must be >= 0"),
        (["optimizer=newton", "optimizer.lr=0.1"],
         "optimizer.lr must not be set for optimizer=newton: lbfgs, newton and lm take no "
         "learning rate, got 0.1"),
        (["optimizer=lm", "optimizer.lr=1e-3"], "optimizer.lr must not be set for optimizer=lm"),
        (["optimizer.name=fast"],
         "optimizer.name must be one of gd, sgd, adam, lbfgs, newton, lm, got 'fast'"),
        (["seed=-9223372036854775809"], "seed must be an integer in [-2**63, 2**64)"),
        (["threads=-1"], "threads must be >= 0"),
        (["task.x_min=1", "task.x_max=0"], "task.x_min < task.x_max, got x_min=1.0, x_max=0.0"),
        (["task.init.b=nan"], "task.init.b must be finite, got nan"),
        (["task=mlp", "task.n_val=0"], "task.n_val must be >= 1, got 0"),
        (["task=mlp", "task.noise=-1"], "task.noise must be >= 0"),
        (["task=cnn", "task.channels=[]"], "task.channels must be a non-empty list"),
        (["task=cnn", "task.image_size=30"], "task.image_size must be a positive multiple of"),
        (["task=cnn", "task.n_train=1"], "task.n_train must be >= 2, got 1"),
    ],
)
def test_validate_names_key_value_and_range(overrides, message):
    with pytest.raises(ConfigError) as info:
        validate(make_cfg(*overrides))
    assert message in str(info.value)
