"""A real `python train.py` whose run dir fills up (a 300 KB tmpfs, or writes that fail with
ENOSPC past 300 KB where the test cannot mount one) or becomes unwritable mid-run (removed,
replaced by a file, read-only): its last line on stderr names the path, the OS's reason, the last
good checkpoint and the command that resumes from it; exit 74; the checkpoint intact, and the
run resumed from it ends as the uninterrupted run does. (TensorBoard's writer thread may print
its own traceback of the failed write above that line.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fitting.train.checkpoint import load
from fitting.train.run import run
from fitting.train.signals import WRITE_FAILED_EXIT
from tests.helpers.app_config import make_cfg
from tests.helpers.train_cli import Finished, user_env

REPO = Path(__file__).resolve().parents[2]
FULL_DISK_HELPER = REPO / "tests" / "helpers" / "full_disk"  # its sitecustomize.py
LONG_RUN = ["steps=100000", "log.every=1", "ckpt.every=50", "log.figure_every=0"]
ROOT = os.geteuid() == 0

pytestmark = pytest.mark.slow


@dataclass
class Disk:
    """A dir on a disk that fills up for processes run with `env`; after `free()` there is room
    for the test's own process to resume the run."""

    dir: Path
    env: dict[str, str]
    free: Callable[[], None]


@pytest.fixture(params=["tmpfs", "injected"])
def full_disk(request, tmp_path) -> Iterator[Disk]:
    """A 300 KB disk: a tmpfs (root only: CI runs as root, and must not skip it) or, anywhere,
    sitecustomize making writes under the dir fail with ENOSPC past 300 KB."""
    where = tmp_path / "disk"
    where.mkdir()
    if request.param == "tmpfs":
        if not ROOT:
            pytest.skip("mounting a tmpfs needs root; the injected case runs here instead")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(where)],
                       check=True)
        try:
            yield Disk(where, user_env(), lambda: subprocess.run(
                ["mount", "-o", "remount,size=20m", str(where)], check=True))
        finally:
            subprocess.run(["umount", str(where)], check=True)
        return
    path = os.pathsep.join(filter(None, [str(FULL_DISK_HELPER), os.environ.get("PYTHONPATH")]))
    # Nothing to free: the injection lives in the subprocesses given this env, and the resumed
    # run (in the test's process) does not load it.
    yield Disk(where, user_env() | {"PYTHONPATH": path, "FULL_DISK_DIR": str(where),
                                    "FULL_DISK_BYTES": str(300_000)}, lambda: None)


def last_line(proc: subprocess.CompletedProcess | tuple[str, str]) -> str:
    """The process's last line on stderr, its one-line message, after checking that no
    traceback is above it but one of TensorBoard's writer thread (reporting its own failed
    write) and that no log record failed."""
    out, err = (proc.stdout, proc.stderr) if hasattr(proc, "stdout") else proc
    for noise in ("Logging error", "Error executing job"):
        assert noise not in out + err, err
    threads = err.split("Exception in thread ")
    assert "Traceback" not in threads[0], err
    for thread in threads[1:]:
        assert "tensorboard/summary/writer" in thread, err
    assert err.endswith("\n") and "Traceback" not in out, err
    return err.splitlines()[-1]


def assert_same_as_uninterrupted(run_dir: Path, steps: int, reference_dir: Path) -> None:
    """The resumed run's checkpoint equals that of the same run never stopped: loss and
    parameters, bit for bit."""
    run(make_cfg(*LONG_RUN, f"steps={steps}"), reference_dir)
    got, want = load(run_dir), load(reference_dir)
    assert (got["step"], got["loop"]["loss"]) == (steps, want["loop"]["loss"])
    for key, value in want["model"].items():
        assert torch.equal(got["model"][key], value), key


def resume(command: str, steps: int, train_cli: Callable[..., Finished]) -> Finished:
    """Run the printed `python train.py resume=...` command with `steps=` (the disk has room
    again: in this process)."""
    python, script, *args = shlex.split(command)
    assert (python, script) == ("python", "train.py")
    return train_cli(*args, f"steps={steps}")


def test_a_full_disk_is_one_line_and_the_run_continues_once_freed(full_disk, train_cli,
                                                                   tmp_path):
    run_dir = full_disk.dir / "run"
    proc = subprocess.run(
        [sys.executable, "train.py", *LONG_RUN, f"hydra.run.dir={run_dir}"],
        cwd=REPO, env=full_disk.env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == WRITE_FAILED_EXIT == 74, proc.stderr
    line = last_line(proc)
    match = re.fullmatch(
        rf"could not write {re.escape(str(run_dir))}/\S+: No space left on device; the last "
        rf"good checkpoint is {re.escape(str(run_dir / 'checkpoint.pt'))} \(after step (\d+)\); "
        rf"resume with: (python train\.py resume={re.escape(str(run_dir))})",
        line,
    )
    assert match, line
    step = int(match[1])
    assert step > 0 and step % 50 == 0
    assert load(run_dir)["step"] == step
    assert not (run_dir / "checkpoint.pt.tmp").exists()

    full_disk.free()
    resumed = resume(match[2], step + 100, train_cli)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_as_uninterrupted(run_dir, step + 100, tmp_path / "reference")


def run_and_break(run_dir: Path, act: Callable[[Path], None]) -> tuple[int, str, str]:
    """Start a long run, `act` on its run dir once its first checkpoint exists; exit status,
    stdout and stderr."""
    out, err = run_dir.parent / "out", run_dir.parent / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "train.py", *LONG_RUN, f"hydra.run.dir={run_dir}"],
            cwd=REPO, env=user_env(), stdout=stdout, stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 120
            while not (run_dir / "checkpoint.pt").exists():
                assert proc.poll() is None, err.read_text()
                assert time.monotonic() < deadline, "no checkpoint within 120 s"
                time.sleep(0.02)
            act(run_dir)
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return code, out.read_text(), err.read_text()


def remount_read_only(mount_point: Path) -> None:
    """Make the bind mount at `mount_point` read-only. The kernel refuses (EBUSY) while a file
    is open for writing through it, as the run's next checkpoint is for a moment: try again."""
    command = ["mount", "-o", "remount,bind,ro", str(mount_point)]
    deadline = time.monotonic() + 10
    while subprocess.run(command, capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, f"{' '.join(command)} kept failing for 10 s"
        time.sleep(0.005)


def remove(run_dir: Path) -> None:
    """rm -rf the run dir (the run may add a file meanwhile: try again)."""
    while run_dir.exists():
        shutil.rmtree(run_dir, ignore_errors=True)


def replace(run_dir: Path) -> None:
    """Remove the run dir and put a file in its place."""
    remove(run_dir)
    run_dir.write_text("not a dir\n")


GONE = ": no checkpoint is left to resume from; start the run again"


@pytest.mark.parametrize(
    ("act", "errors", "reason"),
    [
        (remove, ["No such file or directory"], "the run dir {dir} is gone" + GONE),
        # `replace` removes the dir before it writes the file: a write in between fails with
        # ENOENT, one after it with ENOTDIR. Either way the run dir is a file by the time the
        # message is written, and the message says so.
        (replace, ["Not a directory", "No such file or directory"],
         "the run dir {dir} is no longer a directory" + GONE),
    ],
)
def test_a_run_dir_gone_mid_run_is_one_line(act, errors, reason, tmp_path):
    run_dir = tmp_path / "run"
    code, out, err = run_and_break(run_dir, act)
    assert code == WRITE_FAILED_EXIT, err
    line = last_line((out, err))
    prefix = f"could not write {run_dir}/"
    assert line.startswith(prefix) and "/" not in line[len(prefix):].split(":")[0], line
    error, _, explained = line.split(": ", 1)[1].partition("; ")
    assert error in errors and explained == reason.format(dir=run_dir), line


def test_a_read_only_run_dir_is_one_line_and_the_run_continues_once_writable(tmp_path, train_cli):
    """Read-only as root (who ignores permissions): a read-only bind mount of the run dir;
    otherwise chmod."""
    run_dir = tmp_path / "run"

    def read_only(path: Path) -> None:
        if ROOT:
            subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
            remount_read_only(path)
        else:
            path.chmod(0o555)

    try:
        code, out, err = run_and_break(run_dir, read_only)
    finally:
        if ROOT:
            subprocess.run(["umount", str(run_dir)], check=False)
        else:
            run_dir.chmod(0o755)
    assert code == WRITE_FAILED_EXIT, err
    line = last_line((out, err))
    why = "Read-only file system" if ROOT else "Permission denied"
    match = re.fullmatch(
        rf"could not write {re.escape(str(run_dir))}/\S+: {why}; the last good checkpoint is "
        rf"{re.escape(str(run_dir / 'checkpoint.pt'))} \(after step (\d+)\); resume with: "
        rf"(python train\.py resume={re.escape(str(run_dir))})",
        line,
    )
    assert match, line
    step = int(match[1])
    assert load(run_dir)["step"] == step > 0

    resumed = resume(match[2], step + 100, train_cli)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_as_uninterrupted(run_dir, step + 100, tmp_path / "reference")
