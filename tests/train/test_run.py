"""What a run does, end to end in this process: the tutorial's numbers, every task and impl, the
optimizers that reach the optimum, a user's op, a run that diverges, and the closing lines."""

import hashlib
import logging
import math
import os
import re
import signal
from types import SimpleNamespace

import pytest

from fitting.loop import Stopped
from fitting.slots import USES
from fitting.tasks import TASKS, Poly3Task
from tests.helpers.app_config import CONVERGING
from tests.helpers.train_cli import REPO
from tests.train.helpers import OPTIMUM_RTOL, float_data_optimum, go, results, saved

OPTIMUM = 8.81716541000702  # the least-squares optimum of the tutorial's float64 data
SMALL_CNN = ("task=cnn", "task.n_train=64", "task.n_val=16", "task.batch_size=8",
             "log.every=1")
SMALL_FORECAST = ("task=forecast", "task.vocab=256", "task.context=16", "task.horizon=4",
                  "task.width=16", "task.heads=2", "task.n_train=256", "task.n_val=16")


SWISH = "import torch\n\ndef swish(x):\n    return x * torch.sigmoid(x)\n"


def lines(caplog: pytest.LogCaptureFixture, name: str = "fitting.run") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_the_default_run_is_the_tutorial(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    out, job_log = tmp_path / "run", logging.FileHandler(tmp_path / "train.log")
    logging.getLogger().addHandler(job_log)  # as Hydra's job logging does
    try:
        loss = go(out)
    finally:
        logging.getLogger().removeHandler(job_log)
        job_log.close()
    assert f"{loss:.6g}" == "8.94364"
    said = "\n".join(lines(caplog))
    assert "final loss 8.94364 after 2000 steps" in said
    assert said.count("final") == 1
    assert float_data_optimum(said.splitlines()) == pytest.approx(8.81716753217, rel=OPTIMUM_RTOL)
    assert f"view it: tensorboard --logdir {out}" in said
    assert not lines(caplog, "fitting.track.progress")  # not a terminal: no progress there
    progress = [line for line in (tmp_path / "train.log").read_text().splitlines()
                if re.match(r"\d+/2000 steps", line)]  # the log file has them
    assert len(progress) == 10 and progress[-1].startswith("2000/2000 steps (100%)")
    assert all("step/s" in p and "left" in p for p in progress)
    done = results(out)
    assert done["status"] == "completed" and done["step"] == 2000
    assert done["final_loss"] == loss and done["ops"] == dict.fromkeys(TASKS["poly3"].slots, "custom")
    assert not (out / "run.lock").exists()


@pytest.mark.parametrize("task", TASKS)
def test_builtin_ops_train_as_the_custom_ones(task, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    overrides = {"poly3": ("steps=100",), "cnn": (*SMALL_CNN, "steps=6"),
                 "forecast": (*SMALL_FORECAST, "steps=30")}.get(
        task, (f"task={task}", "steps=30"))
    custom = go(tmp_path / "custom", *overrides)
    assert "\n".join(lines(caplog)).count("final") == 1  # mlp: one final loss, then its metrics
    builtin = go(tmp_path / "builtin", *overrides, "impl=builtin")
    assert math.isfinite(custom) and builtin == pytest.approx(custom, rel=1e-4)
    mine, twin = results(tmp_path / "custom"), results(tmp_path / "builtin")
    assert set(mine["ops"].values()) == {"custom"} and set(twin["ops"].values()) == {"builtin"}
    assert (mine["val_loss"] is None) == (task == "poly3")


@pytest.mark.parametrize("optimizer", CONVERGING)
def test_second_order_optimizers_reach_the_optimum(optimizer, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    loss = go(tmp_path / "run", f"optimizer={optimizer}", "dtype=float64")
    assert loss == pytest.approx(OPTIMUM, rel=1e-13)
    done = results(tmp_path / "run")
    assert done["status"] == "converged" and done["step"] <= 17
    said = "\n".join(lines(caplog))
    assert "at the exact optimum of the float64 data, 8.81716541001, within rounding" in said
    assert " 0 bytes saved" not in said and "by 0 " not in said and "relative above" not in said


@pytest.mark.parametrize("optimizer", list(USES))
def test_the_tutorials_own_legendre_function_reaches_the_optimum(optimizer, tmp_path):
    # forward(ctx, ...) and no jvp: newton's Hessian by double backward, lm's Jacobian by the
    # double-vjp trick, both through torch.autograd.
    loss = go(tmp_path / "run", f"optimizer={optimizer}", "dtype=float64",
              "ops.legendre_p3=docs.examples.tutorial_ops:LegendrePolynomial3")
    assert loss == pytest.approx(OPTIMUM, rel=1e-13)
    done = results(tmp_path / "run")
    source = (REPO / "docs" / "examples" / "tutorial_ops.py").read_bytes()
    assert done["op_sources"] == {"legendre_p3": {
        "file": str(REPO / "docs" / "examples" / "tutorial_ops.py"),
        "sha256": hashlib.sha256(source).hexdigest()}}  # which version of the user's op ran
    assert done["ops"] == {"legendre_p3": "docs.examples.tutorial_ops:LegendrePolynomial3 "
                                          f"@{hashlib.sha256(source).hexdigest()[:8]}"}


@pytest.mark.parametrize("choice, shown", [
    ("my_ops:swish", f"my_ops:swish @{hashlib.sha256(SWISH.encode()).hexdigest()[:8]}"),
    ("{_target_:torch.nn.functional.leaky_relu,_partial_:true,negative_slope:0.1}",
     "torch.nn.functional.leaky_relu(negative_slope=0.1)"),
])
def test_a_user_op_trains_in_its_slot(choice, shown, tmp_path, monkeypatch):
    (tmp_path / "my_ops.py").write_text(SWISH)
    monkeypatch.chdir(tmp_path)  # a <module>:<name> is imported from the current dir
    loss = go(tmp_path / "run", "task=mlp", "steps=5", f"ops.activation={choice}")
    assert math.isfinite(loss)
    assert results(tmp_path / "run")["ops"] == {**dict.fromkeys(TASKS["mlp"].slots, "custom"),
                                                "activation": shown}


def test_a_diverging_run_stops_before_the_bad_update(tmp_path):
    with pytest.raises(Stopped) as stop:  # every step logged: every step checked
        go(tmp_path / "run", "optimizer.lr=1", "steps=50", "log.every=1")
    step = results(tmp_path / "run")["step"]
    assert stop.value.args[1] == 1
    assert re.match(rf"non-finite (loss|gradient) \(.*\) at step {step} ", stop.value.args[0])
    assert "the last good checkpoint is" in stop.value.args[0]
    assert (saved(tmp_path / "run")["status"], saved(tmp_path / "run")["step"]) == ("diverged", step)


def test_divergence_is_found_on_a_logged_step_and_never_replaces_a_good_checkpoint(tmp_path):
    # It diverges near step 90 (found at step 98 with AVX2 and AVX-512 kernels, at 99 with
    # ATEN_CPU_CAPABILITY=default): steps=150 leaves it logged and checkpoint steps after that.
    with pytest.raises(Stopped) as stop:  # no device sync between checks
        go(tmp_path / "run", "optimizer.lr=3e-5", "steps=150", "log.every=20", "ckpt.every=7")
    found, kept = results(tmp_path / "run"), saved(tmp_path / "run")
    assert found["status"] == "diverged"
    assert found["step"] % 20 == 0 or found["step"] % 7 == 0  # a logged or a checkpoint step
    assert kept["step"] < found["step"] and f"(after step {kept['step']})" in stop.value.args[0]
    assert all(t.isfinite().all() for t in kept["model"].values())


def test_ctrl_c_after_the_last_step_lets_the_run_end(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    summary = Poly3Task.summary

    def interrupted_summary(self, model):
        signal.raise_signal(signal.SIGINT)
        return summary(self, model)

    monkeypatch.setattr(Poly3Task, "summary", interrupted_summary)
    with pytest.raises(Stopped) as stop:  # its end whole, then the signal's exit
        go(tmp_path / "run", "steps=5")
    assert stop.value.args[1] == 128 + signal.SIGINT
    assert results(tmp_path / "run")["status"] == "completed"
    assert not any("before training" in line for line in lines(caplog))


def test_a_sweep_parent_gone_stops_a_joblib_job_with_its_checkpoint(tmp_path, monkeypatch):
    worker = SimpleNamespace(runtime=SimpleNamespace(choices={"hydra/launcher": "joblib"}),
                             overrides=SimpleNamespace(task=["steps=50"]),
                             mode=SimpleNamespace(name="MULTIRUN"))
    monkeypatch.setattr("fitting.run._hydra", lambda: worker)
    parents = iter([4242])  # the parent at the start; then the worker is orphaned (init's)
    monkeypatch.setattr(os, "getppid", lambda: next(parents, 1))
    with pytest.raises(Stopped) as stop:
        go(tmp_path / "run", "steps=50")
    assert stop.value.args[1] == 128 + signal.SIGHUP
    assert saved(tmp_path / "run")["step"] == 1
    assert results(tmp_path / "run")["status"] == "interrupted"
