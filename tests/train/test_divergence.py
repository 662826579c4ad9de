"""A non-finite loss or gradient stops the run at that step, before its update: a message naming
the step and the last finite loss, events and checkpoint kept, non-zero exit."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.tasks import poly3
from fitting.train.checkpoint import load
from fitting.train.run import run
from fitting.train.signals import DIVERGED_EXIT, Diverged
from fitting.train.validate import ConfigError
from tests.helpers.app_config import make_cfg
from tests.helpers.train_cli import user_env

REPO = Path(__file__).resolve().parents[2]
QUIET = ["log.figure_every=0", "log.hist_every=0", "log.every=1"]


def scalars(run_dir: Path, tag: str) -> dict[int, float]:
    """step -> value of `tag` in the TensorBoard run in `run_dir`."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


@pytest.mark.slow
def test_lr_1_stops_at_the_first_non_finite_loss(tmp_path):
    """optimizer.lr=1 on poly3 overflows the loss (float32) at step 2."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "optimizer.lr=1", "log.every=1",
         f"hydra.run.dir={tmp_path}"],
        cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == DIVERGED_EXIT == 3
    loss = scalars(tmp_path, "loss/train")
    assert sorted(loss) == [0, 1] and all(math.isfinite(v) for v in loss.values())
    assert proc.stderr == (
        f"non-finite loss (inf) at step 2 (last finite loss {loss[1]:.6g} at step 1); the "
        "output of layer Poly3 (Poly3, impl=legendre_p3) went non-finite first; stopped before "
        "its update, events and checkpoint.pt kept up to there\n"
    )
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() in (tmp_path / "train.log").read_text()

    saved = load(tmp_path)
    assert (saved["status"], saved["step"]) == ("diverged", 2)
    assert all(torch.isfinite(p).all() for p in saved["model"].values())
    assert saved["loop"]["loss"] == loss[1]
    with pytest.raises(ConfigError, match="nothing to resume, the run stopped because its loss"):
        run(make_cfg("optimizer.lr=1", "steps=2000", f"resume={tmp_path}"), tmp_path)


def test_on_nonfinite_raise(tmp_path):
    with pytest.raises(FloatingPointError, match=r"non-finite loss \(inf\) at step 2 \(last"):
        run(make_cfg("optimizer.lr=1", "on_nonfinite=raise", *QUIET), tmp_path)
    assert load(tmp_path)["status"] == "diverged"
    assert sorted(scalars(tmp_path, "loss/train")) == [0, 1]


def test_non_finite_gradient_is_not_applied(tmp_path, monkeypatch):
    """The loss stays finite but the gradient of step 3 is nan: the run stops there with the
    parameters after step 2's update, exactly those of a clean 3-step run, and names the
    backward that returned nan."""
    calls = []

    def nan_grad_at_step_3(model, batch):
        calls.append(1)
        r = poly3.residuals(model, batch)
        if len(calls) >= 4:  # step 3, and the re-run that looks for the op to blame
            r.register_hook(lambda g: torch.full_like(g, math.nan))
        return r

    with monkeypatch.context() as patch:
        patch.setattr(poly3.Poly3Task, "residuals", staticmethod(nan_grad_at_step_3))
        with pytest.raises(Diverged) as info:
            run(make_cfg("steps=10", *QUIET), tmp_path / "nan")
    assert info.value.step == 3 and info.value.exit_code == 3
    assert str(info.value).startswith("non-finite gradient (loss ")
    assert "at step 3 (last finite loss" in str(info.value)
    # The backward that first returned nan, as autograd's anomaly mode names it.
    assert "; autograd's anomaly mode: Function 'SubBackward0' returned nan" in str(info.value)
    run(make_cfg("steps=3", *QUIET), tmp_path / "clean")
    nan, clean = load(tmp_path / "nan"), load(tmp_path / "clean")
    assert nan["step"] == clean["step"] == 3
    for key in clean["model"]:
        assert torch.equal(nan["model"][key], clean["model"][key]), key
    assert sorted(scalars(tmp_path / "nan", "loss/train")) == [0, 1, 2]
