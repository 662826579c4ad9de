"""`python train.py` end to end in subprocesses: single run, multirun, output dirs, help, errors."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.train_cli import user_env

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "train.py")

pytestmark = pytest.mark.slow


def train(*args: str, cwd: Path = REPO, check: bool = True) -> subprocess.CompletedProcess:
    """Run `python train.py *args` (stdout not a TTY, so no progress bar)."""
    proc = subprocess.run(
        [sys.executable, TRAIN, *args], cwd=cwd, env=user_env(), capture_output=True, text=True,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def scalars(run_dir: Path, tag: str) -> dict[int, float]:
    """step -> value of `tag` in the TensorBoard run in `run_dir`."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def test_default_run_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    proc = train(f"hydra.run.dir={run_dir}")
    out = proc.stdout
    assert re.search(r"final loss 8\.9436\d", out)
    assert re.search(r"Result: y = \S+ \+ -2\.2085 \* P3\(\S+ \+ 0\.25549 x\)", out)
    assert f"run dir: {run_dir}" in out
    assert f"tensorboard --logdir {run_dir}" in out
    assert "\r" not in out  # no progress bar when stdout is not a terminal

    # Hydra's job log holds the same lines as the console.
    assert (run_dir / "train.log").read_text().splitlines() == out.splitlines()
    assert (run_dir / ".hydra" / "config.yaml").exists()

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0}).Reload()
    tags = set(acc.Tags()["scalars"])
    per_record = {"loss/train", "params/a", "params/b", "params/c", "params/d",
                  "memory/saved_bytes", "time/step_ms", "optim/grad_norm"}
    assert per_record <= tags
    for tag in per_record:  # log.every=10, and the last step
        assert [e.step for e in acc.Scalars(tag)] == [*range(0, 2000, 10), 1999], tag
    loss = {e.step: e.value for e in acc.Scalars("loss/train")}
    assert round(loss[1999], 4) == 8.9436 and loss[0] > 50 * loss[1999]
    assert acc.Scalars("params/b")[0].value == -1.0
    assert acc.Scalars("params/d")[0].value == pytest.approx(0.3)
    assert all(e.value > 0 for e in acc.Scalars("memory/saved_bytes"))
    assert [e.step for e in acc.Images("plots/fit")] == [1000, 2000]
    assert (run_dir / "fit_step002000.png").exists()
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
    # The console's last step line: the step as TensorBoard numbers it, and steps done.
    assert f"step 1999  loss {loss[1999]:.6g}  (2000/2000 steps done)" in out
    assert [p.name for p in run_dir.iterdir() if p.is_dir()] == [".hydra"]  # no sub-run


def test_multirun_custom_and_builtin(tmp_path):
    sweep = tmp_path / "sweep"
    proc = train("-m", "impl=custom,builtin", f"hydra.sweep.dir={sweep}")
    jobs = sorted(p.name for p in sweep.iterdir() if (p / ".hydra").is_dir())
    # Named by their overrides (TensorBoard shows these as run names), numbered so two jobs
    # never share a dir.
    assert jobs == ["0_impl=custom", "1_impl=builtin"]
    custom = scalars(sweep / jobs[0], "loss/train")
    builtin = scalars(sweep / jobs[1], "loss/train")
    assert len(custom) == len(builtin) == 201  # every 10th step and the last
    assert max(abs(custom[s] - builtin[s]) / builtin[s] for s in custom) <= 1e-4
    assert f"all jobs of the sweep: tensorboard --logdir {sweep}\n" in proc.stdout
    for job in jobs:
        assert f"tensorboard --logdir {sweep / job}\n" in proc.stdout
        assert len(list((sweep / job).glob("events.out.tfevents.*"))) == 1


def test_runs_go_under_the_repo_outputs_whatever_the_cwd(tmp_path):
    proc = train("--cfg", "hydra", "--resolve", cwd=tmp_path)
    run_dir = re.search(r"^  run:\n    dir: (.+)$", proc.stdout, re.M).group(1)
    sweep_dir = re.search(r"^  sweep:\n    dir: (.+)$", proc.stdout, re.M).group(1)
    assert re.fullmatch(re.escape(str(REPO)) + r"/outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d-\d{6}",
                        run_dir)
    assert re.fullmatch(
        re.escape(str(REPO)) + r"/outputs/multirun/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d-\d{6}",
        sweep_dir,
    )
    # A real run from elsewhere lands there too (and is removed again).
    proc = train("steps=3", "log.figure_every=0", cwd=tmp_path)
    made = Path(re.search(r"run dir: (.+)", proc.stdout).group(1))
    try:
        assert made.parent.parent == REPO / "outputs" and (made / "train.log").exists()
        assert not any(tmp_path.iterdir())  # nothing written to the cwd
    finally:
        for path in sorted(made.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        made.rmdir()
        with contextlib.suppress(OSError):  # the date dir too, unless other runs are in it
            made.parent.rmdir()


def test_help_and_cfg_job():
    out = train("--help").stdout
    assert "curve-fitting lab" in out
    assert "task: cnn, mlp, poly3" in out
    assert "optimizer: adam, gd, lbfgs, lm, newton, sgd" in out
    assert "schema" not in out  # the schemas are not options
    assert "impl: custom" in out
    job = train("task=mlp", "steps=5", "--cfg", "job").stdout
    assert job.startswith("task:\n  name: mlp\n") and "\nsteps: 5\n" in job
    assert "name: adam" in job and "hydra" not in job


@pytest.mark.parametrize(
    ("override", "message"),
    [("optimizer.lr=abc", "config error: optimizer.lr=abc: not a valid float"),
     ("task=nope", "config error: task=nope is not an option of task; choose one of cnn, mlp, "
                   "poly3")],
)
def test_bad_override_exits_with_one_config_error_line(override, message):
    proc = train(override, check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
