"""Sweeps on a real SLURM (`bash .ci/slurm/up.sh` brings up a single-node one): a sweep, a
timeout's requeue, an admin's requeue and a cancelled job, as docs/operations.md ("On a
cluster") describes them. Each sweep has two jobs of one config: job 0 runs untouched, job 1 is
signalled, requeued or cancelled after its first checkpoint, and must end as job 0 did."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
# Long enough to be caught mid-run after the first checkpoint (ckpt.every) on a fast machine,
# short enough for seconds of training on a busy one.
RUN = ("task=mlp", "steps=2000", "ckpt.every=100", "seed=3,3")


def _cluster_problem() -> str | None:
    """Why the SLURM tests cannot run here, or None."""
    if shutil.which("sinfo") is None:
        return "SLURM is not installed (no sinfo): bash .ci/slurm/up.sh brings up a local one"
    try:
        sinfo = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                               timeout=20)
        sacct = subprocess.run(["sacct", "-n", "-X", "-S", "now"], capture_output=True,
                               text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "SLURM does not answer (sinfo/sacct timed out)"
    if not re.search(r"^(idle|mixed|allocated)", sinfo.stdout, re.M):
        said = " ".join((sinfo.stdout + sinfo.stderr).split()) or "no node"
        return f"no SLURM node is up (sinfo: {said[:200]}): bash .ci/slurm/up.sh"
    if sacct.returncode:
        return ("sacct does not answer: submitit follows its jobs with sacct (accounting "
                f"needed): {' '.join(sacct.stderr.split())[:200]}")
    return None


def _slurm(*command: str, check: bool = True) -> str:
    """A SLURM command's stdout; never waits on a hung cluster for more than 20 s."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=20)
    if check and done.returncode:
        raise AssertionError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


PROBLEM = _cluster_problem()
if PROBLEM and os.environ.get("SLURM_TESTS") == "required":  # CI: a skip would hide a failure
    raise RuntimeError(f"SLURM_TESTS=required, but {PROBLEM}")
pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM)), pytest.mark.slow,
              pytest.mark.timeout(300)]


class Sweep:
    """`python train.py -m hydra/launcher=<launcher> ...` into its own sweep dir."""

    def __init__(self, root: Path, launcher: str, *overrides: str) -> None:
        self.dir = root / "sweep"
        self.process = subprocess.Popen(
            [sys.executable, "train.py", "-m", f"hydra/launcher={launcher}",
             f"hydra.sweep.dir={self.dir}", *overrides],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def job_id(self, num: int) -> str:
        """SLURM's id of job `num` (<array id>_<num>), once submitted."""
        found = self.wait(lambda: [p.name for p in (self.dir / ".submitit").glob(f"*_{num}")
                                   if re.fullmatch(rf"\d+_{num}", p.name)], "the submission")
        return found[0]

    def run_dir(self, num: int) -> Path:
        """Job `num`'s run dir, once it started."""
        return self.wait(lambda: next(iter(self.dir.glob(f"{num}_*")), None), f"job {num}'s dir")

    def first_checkpoint(self, num: int) -> int:
        """Wait for job `num`'s first checkpoint (it is then mid-run); its step."""
        run_dir = self.run_dir(num)
        return self.wait(lambda: (checkpoint(run_dir) or {}).get("step"), f"job {num}'s checkpoint")

    def wait(self, find: Callable, what: str, timeout: float = 120):
        """wait_for(find, ...), failing at once with the sweep's output if the sweep ends."""
        def found_or_ended():
            return find() or self.process.poll() is not None

        found = wait_for(found_or_ended, timeout, what)
        if found is True and not find():
            pytest.fail(f"the sweep ended before {what}: {self.end()}")
        return find()

    def job_log(self, num: int) -> str:
        """Job `num`'s output under SLURM, every attempt of it (submitit appends)."""
        return "".join(p.read_text() for p in self.dir.glob(f".submitit/*_{num}/*_log.*"))

    def end(self, timeout: float = 180) -> tuple[int, str]:
        """Wait for the sweep's end: its exit status and output."""
        try:
            out, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
            pytest.fail(f"the sweep did not end in {timeout} s; its output:\n{out}")
        return self.process.returncode, out

    def stop(self) -> None:
        """Cancel what is left of the sweep (a failed test leaves no job on the node)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        ids = {p.name.split("_")[0] for p in self.dir.glob(".submitit/*")
               if re.fullmatch(r"\d+(_\d+)?", p.name)}
        if ids:
            _slurm("scancel", *sorted(ids), check=False)


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Callable[..., Sweep]]:
    """`sweep(launcher, *overrides)` starts a sweep in tmp_path; its jobs are cancelled after."""
    started: list[Sweep] = []

    def start(launcher: str, *overrides: str) -> Sweep:
        started.append(Sweep(tmp_path, launcher, *overrides))
        return started[-1]

    yield start
    for each in started:
        each.stop()


def wait_for(find: Callable, timeout: float, what: str):
    """Poll `find()` until it returns something true; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"no {what} after {timeout} s")


def results(run_dir: Path) -> dict:
    """The run's results.json."""
    return json.loads((run_dir / "results.json").read_text())


def checkpoint(run_dir: Path) -> dict | None:
    """The run's checkpoint.pt as a resume reads it (None while there is none)."""
    try:
        return torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None


def assert_same_run(a: Path, b: Path) -> None:
    """Two runs of one config ended bit-identical: results and weights."""
    ra, rb = results(a), results(b)
    assert (rb["status"], rb["step"]) == ("completed", ra["step"])
    assert (rb["final_loss"], rb["val_loss"]) == (ra["final_loss"], ra["val_loss"])
    wa, wb = checkpoint(a)["model"], checkpoint(b)["model"]
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def resumed_after(sweep: Sweep, num: int) -> int:
    """The step job `num` resumed after, as its requeued attempt logged it."""
    log = (sweep.run_dir(num) / "train.log").read_text()
    found = re.findall(r"resuming .* after step (\d+) of \d+ \(its own config", log)
    assert len(found) == 1, f"job {num} did not resume once; its log:\n{log}"
    return int(found[0])


def watch(sweep: Sweep, run_dir: Path) -> tuple[list[int], list[tuple[str, int]]]:
    """Until the sweep ends: the steps of every checkpoint the run writes, and every
    (status, step) its results.json says (a requeued job's first attempt ends 'interrupted')."""
    steps: list[int] = []
    ends: list[tuple[str, int]] = []
    seen = {"checkpoint.pt": 0, "results.json": 0}
    while sweep.process.poll() is None:
        for name in seen:
            try:
                mtime = (run_dir / name).stat().st_mtime_ns
            except FileNotFoundError:
                continue
            if mtime != seen[name]:
                seen[name] = mtime
                if name == "checkpoint.pt":
                    steps.append(checkpoint(run_dir)["step"])
                else:
                    ends.append((results(run_dir)["status"], results(run_dir)["step"]))
        time.sleep(0.2)
    return steps, ends


def state(job_id: str) -> str:
    """The job's state in SLURM's accounting (its last attempt)."""
    return _slurm("sacct", "-n", "-X", "-j", job_id, "-o", "State").strip()


def requeued(job_id: str) -> bool:
    """Whether SLURM's accounting holds a requeued attempt of the job."""
    return "REQUEUED" in _slurm("sacct", "-n", "-X", "-D", "-j", job_id, "-o", "State")


def assert_resumed(sweep: Sweep, first: int, steps: list[int], ends: list[tuple[str, int]]):
    """Job 1 stopped after a step at or after `first` with a checkpoint, resumed from that
    step, never wrote an older checkpoint, and ended as job 0 did."""
    assert ends[0][0] == "interrupted" and ends[-1] == ("completed", 2000), ends
    stopped = ends[0][1]
    assert stopped >= first and resumed_after(sweep, 1) == stopped
    assert steps == sorted(steps) and stopped in steps, f"checkpoints at steps {steps}"
    assert_same_run(sweep.run_dir(0), sweep.run_dir(1))


def test_a_sweep_runs_under_slurm_and_ends_with_its_table(sweep):
    run = sweep("submitit_slurm", "task=mlp", "steps=200", "seed=1,2")
    code, out = run.end()
    assert code == 0, out
    for num in (0, 1):
        run_dir = run.run_dir(num)
        assert results(run_dir)["status"] == "completed"
        assert checkpoint(run_dir)["step"] == 200
        assert list(run_dir.glob("events.out.tfevents.*"))
        assert re.search(rf"^#{num} seed={num + 1} .* completed$", out, re.M), out  # its row
    jobs = [run.job_id(0), run.job_id(1)]  # the sweep ends at their results, SLURM's jobs after
    wait_for(lambda: all(state(job) == "COMPLETED" for job in jobs), 30, "COMPLETED in sacct")
    assert f"tensorboard --logdir {run.dir}" in out
    assert "Traceback" not in out


def test_a_timeout_signal_checkpoints_requeues_and_resumes_bit_identical(sweep):
    # What SLURM sends signal_delay_s before a job's time limit (and at a preemption): USR2 to
    # the job's steps. The job checkpoints, submitit requeues it, it resumes in its own dir.
    run = sweep("submitit_slurm", *RUN)
    job, run_dir, first = run.job_id(1), run.run_dir(1), run.first_checkpoint(1)
    _slurm("scancel", "--signal=USR2", job)
    steps, ends = watch(run, run_dir)
    code, out = run.end()
    assert code == 0, out
    log = run.job_log(1)
    said = re.findall(r"interrupted by SIGUSR2 after (\d+) of 2000 steps; .*handing over", log)
    assert said == [str(ends[0][1])] and "Requeued job" in log and requeued(job), log
    assert "stopped at once" not in log  # submitit's SIGTERM after the handover is its own
    assert_resumed(run, first, steps, ends)


def test_a_requeued_job_resumes_from_its_checkpoint_never_an_older_one(sweep):
    # `scontrol requeue` (an admin, a node's maintenance): SIGTERM, then the job starts again.
    run = sweep("submitit_slurm", *RUN)
    job, run_dir, first = run.job_id(1), run.run_dir(1), run.first_checkpoint(1)
    _slurm("scontrol", "requeue", job)
    steps, ends = watch(run, run_dir)
    code, out = run.end()
    assert code == 0, out
    said = re.findall(r"interrupted by SIGTERM after (\d+) of 2000 steps", run.job_log(1))
    assert said == [str(ends[0][1])] and requeued(job), run.job_log(1)
    assert_resumed(run, first, steps, ends)


def test_a_cancelled_job_fails_alone_and_the_sweep_still_ends(sweep):
    run = sweep("slurm", *RUN)
    job, run_dir, _ = run.job_id(1), run.run_dir(1), run.first_checkpoint(1)
    _slurm("scancel", job)
    code, out = run.end()
    assert code == 1, out
    assert "Traceback" not in out
    assert re.search(rf"1 of 2 jobs did not complete: #1 \(.*SLURM job {job}\): CANCELLED", out)
    done = run.run_dir(0)
    assert results(done)["status"] == "completed"
    assert re.search(r"^#0\b.* completed$", out, re.M), out  # the sweep's table: job 0 done
    assert f"tensorboard --logdir {run.dir}" in out
    # The cancelled job checkpointed at SIGTERM: `python train.py resume=<its dir>` goes on.
    assert results(run_dir)["status"] == "interrupted"
    assert checkpoint(run_dir)["step"] == results(run_dir)["step"]


def test_a_submission_slurm_refuses_is_one_line(tmp_path):
    refused = Sweep(tmp_path, "slurm", "hydra.launcher.partition=nope", "steps=5")
    code, out = refused.end()
    assert code == 1 and "Traceback" not in out, out
    assert "SLURM refused the sweep's jobs: sbatch: error: Batch job submission failed: Invalid " \
           "partition name specified; check hydra.launcher.*\n" in out


def test_a_job_whose_code_leaves_a_thread_running_ends_and_frees_its_node(sweep, tmp_path,
                                                                          monkeypatch):
    (tmp_path / "threaded.py").write_text(
        "import threading, time, torch\nthreading.Thread(target=time.sleep, args=(3600,), "
        "name='forever').start()\nrelu = torch.relu\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # sbatch passes the environment on
    run = sweep("slurm", "task=mlp", "steps=3", "ops.activation=threaded:relu,builtin")
    code, out = run.end()
    assert code == 1 and "Traceback" not in out, out
    assert "did not complete: #0 failed (exit 1): your code left threads running (forever)" in out
    job = run.job_id(0)
    assert wait_for(lambda: state(job) in ("FAILED", "COMPLETED") and state(job), 60,
                    f"job {job}'s end") == "FAILED"  # not RUNNING on its node for ever


def test_a_job_whose_op_fails_only_in_training_is_a_row(sweep, tmp_path, monkeypatch):
    (tmp_path / "late.py").write_text(
        "import torch\ncalls = 0\ndef relu(x):\n    global calls\n    calls += x.shape[0] == 256"
        "\n    if calls >= 7:\n        raise ValueError('only at the training batch size')"
        "\n    return torch.relu(x)\n")  # from step 3 of the mlp's training, not its pre-check
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    run = sweep("slurm", "task=mlp", "steps=8", "ckpt.every=2", "ops.activation=late:relu,builtin")
    code, out = run.end()
    assert code == 1 and "Traceback" not in out, out
    assert re.search(r"did not complete: #0 failed \(exit 1\): your op \(ops.activation=late:relu"
                     r" @\w+\) failed in training at step 3, not in its pre-check: ValueError: "
                     r"only at the training batch size", out), out
    assert results(run.run_dir(0))["status"] == "failed" and checkpoint(run.run_dir(0))["step"] == 2
    assert results(run.run_dir(1))["status"] == "completed"
