"""Signals as a scheduler sends them: SIGTERM, SIGINT and SIGHUP stop at the end of the step
with a checkpoint; a second one stops at once naming the last checkpoint (a hung step); a
Ctrl-C before training starts is one line, exit 130."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.train_cli import REPO, TRAIN, user_env

pytestmark = pytest.mark.slow

# An activation that hangs from its 40th call on (one call per training step of this mlp).
HANGING_OP = """
import time
import torch
calls = [0]
def hangs_later(x):
    calls[0] += 1
    while calls[0] > 40:
        time.sleep(0.05)
    return torch.relu(x)
"""
MLP = ["task=mlp", "task.hidden=[8]", "task.n_points=32", "log.figure_every=0"]


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, TRAIN, *args], cwd=cwd, env=user_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_sighup_stops_like_sigterm_with_a_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = _start([*MLP, "steps=200000", "ckpt.every=0", f"hydra.run.dir={out}"], REPO)
    _wait_for(out / "run.lock")
    time.sleep(1.0)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGHUP
    assert err.splitlines()[-1].startswith("interrupted by SIGHUP after ")
    payload = torch.load(out / "checkpoint.pt", weights_only=True)
    assert payload["status"] == "interrupted"


def test_a_second_signal_stops_a_hung_step_at_once_naming_the_last_checkpoint(tmp_path):
    (tmp_path / "hang_ops.py").write_text(HANGING_OP)
    out = tmp_path / "run"
    proc = _start([*MLP, "steps=1000", "ckpt.every=10", "ops.activation=hang_ops:hangs_later",
                   f"hydra.run.dir={out}"], tmp_path)
    _wait_for(out / "checkpoint.pt")
    time.sleep(1.0)  # the op hangs by now, at step 39 (its 41st call; validation made one)
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert proc.poll() is None  # the first signal waits for the step, which never ends
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    last = err.splitlines()[-1]
    assert last.startswith("stopped at once by a second SIGTERM; the last good checkpoint is "
                           f"{out / 'checkpoint.pt'} (after step 30); resume with: "), last


def test_ctrl_c_before_training_is_one_line_and_130(tmp_path):
    proc = _start([*MLP, "steps=5", f"hydra.run.dir={tmp_path / 'run'}"], REPO)
    time.sleep(0.3)  # still importing
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == "interrupted by SIGINT before training started (nothing to resume)\n"
