"""The run dir under faults, as `python train.py` users see it: a config error beside a user's
files, runs racing for one dir, a run killed before its first checkpoint, a refusal that writes
nothing, a sweep job resumed with the command the app printed, a full disk and a read-only dir
(real tmpfs mounts, as root), and SLURM times that cannot work."""

import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from fitting.tasks import Poly3Task
from tests.helpers.train_cli import REPO, TRAIN, user_env
from tests.train.helpers import go, results, same_weights, signal_at


def files(out):
    """Every file under `out` with its bytes: what a refused run must leave as it was."""
    return {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_config_error_removes_only_the_dirs_it_made(tmp_path, train_cli):
    mine, empty, parent = tmp_path / "mine", tmp_path / "empty" / "dir", tmp_path / "parent"
    empty.mkdir(parents=True)
    mine.mkdir()
    parent.mkdir()  # empty, and not made by the run below it
    (mine / "notes.log").write_text("x")
    for out in (mine, empty, tmp_path / "new" / "run", parent / "new" / "run"):
        done = train_cli("steps=-1", f"hydra.run.dir={out}")
        assert (done.returncode, done.stderr) == (2, "config error: steps must be >= 1, got -1\n")
    assert files(mine) == {mine / "notes.log": b"x"} and not (tmp_path / "new").exists()
    assert empty.is_dir()  # existed before: never removed, even empty
    assert parent.is_dir() and not (parent / "new").exists()


def train(out, *args):
    return subprocess.Popen([sys.executable, TRAIN, *args, f"hydra.run.dir={out}"], cwd=REPO,
                            env=user_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
def test_a_run_in_a_dir_another_run_holds_is_refused_by_its_lock(tmp_path):
    out = tmp_path / "run"
    runs = [train(out, "steps=10000000")]  # the same config: only the lock tells them apart
    try:
        deadline = time.monotonic() + 120  # wide: starting torch on a loaded box
        while not list(out.glob("events.out.tfevents.*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        runs.append(train(out, "steps=10000000"))  # a second run that got in would train on
        assert runs[1].wait(timeout=120) == 2
        assert runs[1].stderr.read() == (f"config error: {out} is in use by another run (pid "
                                         f"{runs[0].pid}): wait for it to end, or run in another "
                                         "dir\n")
    finally:
        for run in runs:
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=120)


@pytest.mark.slow
def test_runs_racing_for_one_dir_leave_one_whole_run(tmp_path):
    out = tmp_path / "run"
    racers = [train(out, "steps=300", "seed=1"), train(out, "steps=-1"),
              train(out, "steps=300", "seed=2")]
    ends = [(p.wait(timeout=120), p.stderr.read()) for p in racers]
    assert ends[1] == (2, "config error: steps must be >= 1, got -1\n")
    won = [i for i in (0, 2) if ends[i][0] == 0]
    assert len(won) == 1, ends
    lost = ends[2 - won[0]]
    assert lost[0] == 2 and lost[1].count("\n") == 1, lost
    assert "in use by another run" in lost[1] or "holds another run (seed: " in lost[1]
    seed = won[0] // 2 + 1
    assert results(out)["status"] == "completed" and not (out / "run.lock").exists()
    assert f"seed: {seed}\n" in (out / ".hydra" / "config.yaml").read_text()
    assert f"seed={seed}" in (out / "train.log").read_text()
    assert f"seed={3 - seed}" not in (out / "train.log").read_text()


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_is_continued_by_its_config_alone(tmp_path,
                                                                                  train_cli):
    out = tmp_path / "run"
    process = train(out, "steps=1000000", "ckpt.every=0")
    deadline = time.monotonic() + 120
    while not list(out.glob("events.out.tfevents.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    process.kill()
    process.wait()
    before = files(out)
    assert not (out / "checkpoint.pt").exists() and (out / ".hydra" / "config.yaml").is_file()
    other = train_cli("task=mlp", f"hydra.run.dir={out}")
    assert other.returncode == 2 and other.stderr.startswith(
        f"config error: {out} holds another run (task._target_: 'fitting.tasks.Poly3Task' "
        "there, 'fitting.tasks.MLPTask' here; optimizer._target_: ")
    assert files(out) == before  # nothing written: no .hydra/, no train.log line, no events
    resumed = train_cli(f"resume={out}", "steps=30")
    assert resumed.returncode == 0 and f"resuming {out} after step 0 of 30" in resumed.stdout
    assert results(out)["final_loss"] == go(tmp_path / "fresh", "steps=30")
    assert same_weights(out, tmp_path / "fresh")


def test_a_sweep_job_resumes_with_the_command_the_app_printed(tmp_path, train_cli, monkeypatch):
    op = "ops.legendre_p3=docs.examples.tutorial_ops:LegendrePolynomial3"
    signal_at(monkeypatch, Poly3Task, 3, signal.SIGTERM)
    stopped = train_cli("-m", "steps=8", op, "seed=1,2", f"hydra.sweep.dir={tmp_path}")
    assert stopped.returncode == 128 + signal.SIGTERM
    command = stopped.stderr.strip().rsplit("resume with: ", 1)[1]
    job = tmp_path / f"0_{op},seed=1,steps=8"
    assert command.startswith(f"python train.py 'resume=\"{job}\"' 'ops.legendre_p3=")
    monkeypatch.undo()
    resumed = train_cli(*shlex.split(command)[2:])
    assert resumed.returncode == 0, resumed.stderr
    assert results(job)["status"] == "completed" and results(job)["step"] == 8


def test_a_refusal_writes_nothing_into_the_other_runs_dir(tmp_path, train_cli):
    out = tmp_path / "run"
    assert train_cli("steps=5", f"hydra.run.dir={out}").returncode == 0
    before = files(out)
    refused = train_cli("steps=5", "optimizer=adam", "log.every=3", f"hydra.run.dir={out}")
    assert refused.returncode == 2 and refused.stderr.startswith(
        f"config error: {out} holds another run (optimizer._target_: 'fitting.optim.GD' there, "
        "'torch.optim.Adam' here)")
    assert files(out) == before and refused.stdout == ""


@pytest.fixture
def tmpfs(tmp_path):
    """A 1 MB tmpfs (a disk that fills), mounted for the test; skipped unless root."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True) if shutil.which("mount") else None
    if made is None or made.returncode:
        pytest.skip(f"cannot mount a tmpfs (root is needed): {made and made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.slow
def test_a_full_disk_is_one_line_naming_the_path_and_the_last_good_checkpoint(tmpfs):
    out = tmpfs / "run"
    process = train(out, "task=mlp", "steps=100000", "log.hist_every=1", "ckpt.every=5")
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 74 and stderr.count("\n") == 1, stderr  # no thread's traceback
    assert stderr.startswith(f"could not write {out}/") and ": No space left on device; " in stderr
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert f"the last good checkpoint is {out}/checkpoint.pt (after step {ckpt['step']}); " \
           f"resume with: python train.py resume={out}\n" in stderr
    assert np.isfinite(ckpt["loop"]["loss"]) and ckpt["step"] > 0


def test_a_read_only_dir_is_one_line_on_a_new_run_and_on_resume(tmpfs, train_cli):
    assert train_cli("steps=5", f"hydra.run.dir={tmpfs / 'run'}").returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    for args, line in [
        ([f"hydra.run.dir={tmpfs / 'new'}"], f"could not write {tmpfs / 'new'}: Read-only file "
                                             "system\n"),
        ([f"hydra.run.dir={tmpfs}"], f"could not write {tmpfs / 'run.lock'}: Read-only file "
                                     "system; no checkpoint is left to resume from: start the "
                                     "run again\n"),
        ([f"resume={tmpfs / 'run'}", "steps=9"],
         f"could not write {tmpfs / 'run' / 'run.lock'}: Read-only file system; the last good "
         f"checkpoint is {tmpfs / 'run' / 'checkpoint.pt'}; resume with: python train.py "
         f"resume={tmpfs / 'run'}\n")]:
        done = train_cli(*args)
        assert (done.returncode, done.stderr) == (74, line)


def test_slurm_times_that_cannot_work_are_refused_at_submit(tmp_path, train_cli):
    done = train_cli("-m", "hydra/launcher=slurm", "hydra.launcher.timeout_min=1",
                     "hydra.launcher.signal_delay_s=120", f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 1
    assert "hydra.launcher.signal_delay_s=120 is not below timeout_min=1 (60 s)" in done.stderr
    assert not (tmp_path / ".submitit").exists()
