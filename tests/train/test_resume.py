"""Kill a real `python train.py` mid-run with SIGTERM or SIGINT, resume it with
`python train.py resume=<run dir>`, and get exactly the uninterrupted run (CPU): final
parameters, final loss, and each logged loss once with the same value."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.train.checkpoint import load
from fitting.train.run import run
from tests.helpers.train_cli import user_env

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "train.py")

pytestmark = pytest.mark.slow

# Each run trains for 1-2 s (on a 2-core machine running the suite): the signal, sent as soon
# as the first checkpoint (step 50) exists, comes with a second or more of steps to spare.
CASES = {
    "poly3": (["steps=1500", "log.every=1"], signal.SIGTERM),
    "mlp": (["task=mlp", "steps=500", "task.n_points=64", "task.hidden=[16,16]",
             "log.every=1"], signal.SIGINT),
    "cnn": (["task=cnn", "steps=300", "task.n_train=64", "task.n_val=16", "task.batch_size=8",
             "task.image_size=16"], signal.SIGTERM),
}
COMMON = ["ckpt.every=50", "log.figure_every=0", "log.hist_every=100"]


def start_and_interrupt(run_dir: Path, overrides: list[str], signum: int) -> tuple[int, str]:
    """Start `python train.py`, send `signum` once its first checkpoint exists; exit status
    and stderr."""
    err = run_dir.parent / "interrupted.err"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, TRAIN, *overrides, f"hydra.run.dir={run_dir}"],
            cwd=REPO, env=user_env(), stdout=subprocess.DEVNULL, stderr=stderr,
        )
        deadline = time.monotonic() + 90
        while not (run_dir / "checkpoint.pt").exists():
            assert proc.poll() is None, "the run ended before it could be interrupted"
            assert time.monotonic() < deadline, "no checkpoint within 90 s"
            time.sleep(0.01)
        proc.send_signal(signum)
        code = proc.wait(timeout=90)
    return code, err.read_text()


def curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, value) of every loss/train event TensorBoard shows for the run, in order."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    return [(e.step, e.value) for e in acc.Scalars("loss/train")]


@pytest.mark.parametrize("task", list(CASES))
def test_interrupted_and_resumed_equals_uninterrupted(task, tmp_path, train_cli):
    overrides, signum = CASES[task]
    overrides = [*overrides, *COMMON]
    run_dir = tmp_path / "run"
    steps = int(next(o for o in overrides if o.startswith("steps=")).split("=")[1])

    code, err = start_and_interrupt(run_dir, overrides, signum)
    assert code == 128 + signum, err
    saved = load(run_dir)
    assert saved["status"] == "interrupted" and 50 <= saved["step"] < steps
    name = signal.Signals(signum).name
    message = (f"interrupted by {name} after {saved['step']} of {steps} steps; the last good "
               f"checkpoint is {run_dir / 'checkpoint.pt'} (after step {saved['step']}); "
               f"resume with: python train.py resume={run_dir}")
    assert err == message + "\n"
    assert message in (run_dir / "train.log").read_text()
    hydra_config = (run_dir / ".hydra" / "config.yaml").read_text()

    resumed = train_cli(f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming after step {saved['step']} of {steps}" in resumed.stdout
    assert (run_dir / ".hydra" / "config.yaml").read_text() == hydra_config  # kept as it was
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2  # one TensorBoard run

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    reference_loss = run(cfg, tmp_path / "reference")
    final, reference = load(run_dir), load(tmp_path / "reference")
    assert final["status"] == "completed" and final["step"] == steps
    assert final["loop"]["loss"] == reference["loop"]["loss"] == reference_loss
    for key, value in reference["model"].items():
        assert torch.equal(final["model"][key], value), key  # bit-identical, buffers too

    got, want = curve(run_dir), curve(tmp_path / "reference")
    assert [s for s, _ in got] == [s for s, _ in want]  # each logged step once, none missing
    assert got == want


def test_resume_refuses_a_different_run(tmp_path, train_cli):
    run_dir = tmp_path / "run"
    done = train_cli("steps=3", "log.figure_every=0", f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, done.stderr
    proc = train_cli(f"resume={run_dir}", "task=mlp", "seed=1")
    assert proc.returncode == 2
    assert proc.stderr == (
        f"config error: resume={run_dir} continues that run with its own config; these "
        "overrides change it: task='mlp' (the run has 'poly3'), seed=1 (the run has 0). Only "
        "steps, log, ckpt, threads, on_nonfinite, profile may be given\n"
    )
