"""What an optimizer's run shows and keeps, end to end: the lr schedule (optim/lr, resumed
bit-identical), every step logged by lbfgs, newton and lm, and lbfgs's evaluations per step."""

from __future__ import annotations

import math
import signal

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fitting.config import ConfigError
from fitting.loop import Stopped
from fitting.slots import USES
from fitting.tasks import MLPTask
from tests.helpers.app_config import make_cfg
from tests.train.helpers import go, results, same_weights, saved, signal_at


def scalars(out, tag: str) -> dict[int, float]:
    """A TensorBoard scalar of the run in `out`, {step: value}."""
    events = EventAccumulator(str(out), size_guidance={"scalars": 0})
    events.Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


def test_the_schedule_is_logged_and_a_stopped_run_resumes_it_bit_identical(tmp_path, monkeypatch):
    run = ("task=mlp", "steps=30", "log.every=5")  # mlp: Adam lr 0.01 with the cosine schedule
    whole = go(tmp_path / "whole", *run)
    lr = scalars(tmp_path / "whole", "optim/lr")
    assert sorted(lr) == [0, 5, 10, 15, 20, 25, 29]
    for step, value in lr.items():  # the lr each step ran with: 0.01 along a half cosine
        assert value == pytest.approx(0.005 * (1 + math.cos(math.pi * step / 30)), rel=1e-6)
    signal_at(monkeypatch, MLPTask, 12, signal.SIGTERM)
    with pytest.raises(Stopped):
        go(tmp_path / "parts", *run)
    monkeypatch.undo()
    assert saved(tmp_path / "parts")["scheduler"]["last_epoch"] == 13
    assert go(tmp_path / "parts", f"resume={tmp_path / 'parts'}") == whole
    assert same_weights(tmp_path / "whole", tmp_path / "parts")


@pytest.mark.parametrize(("overrides", "every", "patience", "steps"), [
    ((), 10, 0, 2000),  # poly3's own
    (("optimizer=newton",), 1, 3, 2000),  # an optimizer's log.every and stop.patience win...
    (("optimizer=lbfgs", "task=mlp"), 1, 3, 2000),
    (("optimizer=lm", "log.every=4", "steps=50", "stop.patience=0"), 4, 0, 50),  # ...the user's too
    (("task=mlp",), 10, 0, 2000),
    (("task=cnn", "optimizer=sgd", "log.every=3"), 3, 0, 2000),
])
def test_an_optimizers_settings_win_over_a_tasks_and_the_command_line_over_both(
        overrides, every, patience, steps):
    cfg = make_cfg(*overrides)
    assert (cfg.log.every, cfg.stop.patience, cfg.steps) == (every, patience, steps)


@pytest.mark.parametrize("optimizer", list(USES))  # no lr
def test_a_schedule_for_an_optimizer_without_an_lr_is_one_line(optimizer, tmp_path):
    with pytest.raises(ConfigError, match=rf"^optimizer={optimizer} has no lr to schedule; "
                                          r"scheduler=none$"):
        go(tmp_path / "run", f"optimizer={optimizer}", "scheduler=cosine")
    assert not (tmp_path / "run").exists()


def test_newton_logs_every_step_unless_told(tmp_path):
    go(tmp_path / "run", "optimizer=newton", "dtype=float64")
    done = results(tmp_path / "run")
    assert done["status"] == "converged"
    assert sorted(scalars(tmp_path / "run", "loss/train")) == list(range(done["step"]))
    go(tmp_path / "told", "optimizer=newton", "dtype=float64", "log.every=5")
    logged = set(scalars(tmp_path / "told", "loss/train"))
    assert {0, 5} <= logged and not logged & {1, 2, 3, 4, 6, 7}


def test_lbfgs_logs_each_steps_evaluations(tmp_path):
    go(tmp_path / "run", "optimizer=lbfgs", "dtype=float64")
    evals = scalars(tmp_path / "run", "optim/evals")
    assert sorted(evals) == list(range(results(tmp_path / "run")["step"]))
    # Every step logged: they add up to what torch's LBFGS counted, line searches included.
    assert sum(evals.values()) == saved(tmp_path / "run")["optimizer"]["state"][0]["func_evals"]
    assert max(evals.values()) > 1
