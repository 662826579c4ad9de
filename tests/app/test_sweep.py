"""A sweep with a failed job still reports, with the basic and the joblib launcher: every job in
the end's table, a failed one as a row with its exit status and its one line, the verdicts from
the jobs that finished, exit 1 and no traceback. A job's peak RSS only where the process is its
own (joblib), the tensor peak where the jobs share one (basic)."""

import re
import subprocess
import sys
import threading

import pytest
from hydra.core.hydra_config import HydraConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.train_cli import REPO, TRAIN, user_env
from tests.train.helpers import results  # imports the app: its config schema is registered


def table_rows(stdout: str) -> dict[str, str]:
    """The end's table: each row by its job's number (`#1`)."""
    return {m[1]: m[0] for m in re.finditer(r"^(#\d+) .*$", stdout, re.MULTILINE)}


def job_dir(sweep, num: int):
    return next(sweep.glob(f"{num}_*"))


def tags(run_dir) -> set[str]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return set(acc.Tags()["scalars"])


def test_a_job_whose_tensorboard_cannot_start_is_one_row_and_one_line(tmp_path, train_cli,
                                                                       monkeypatch):
    start = threading.Thread.start

    def start_or_fail(thread):  # the writer thread of job #1's SummaryWriter, as under load
        if (type(thread).__name__ == "_AsyncWriterThread" and HydraConfig.initialized()
                and HydraConfig.get().job.num == 1):
            raise RuntimeError("can't start new thread")
        return start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_or_fail)
    done = train_cli("-m", "task=mlp", "steps=3", "ops.activation=custom,builtin", "seed=0,1",
                     f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert sorted(rows) == ["#0", "#1", "#2", "#3"]
    assert rows["#1"].endswith(" failed (exit 1)")
    assert all(rows[n].endswith(" completed") for n in ("#0", "#2", "#3"))
    assert ("did not complete: #1 failed (exit 1): RuntimeError: can't start new thread"
            in done.stdout.splitlines())
    assert "RuntimeError: can't start new thread" in done.stderr  # as the job fails
    # The verdict from the jobs that finished: custom's one seed against builtin's two.
    assert re.search(r"activation=custom \[#0 #1\] vs builtin \[#2 #3\]: .* final loss median "
                     r"\S+ \(n=1\) vs the reference's \S+ \(\S+, n=2\)",
                     done.stdout.replace("\n    ", " "))
    failed = results(job_dir(tmp_path, 1))
    assert "can't start new thread" in failed["traceback"]  # for whoever fixes it
    # Jobs in one process: no peak RSS of their own; the tensor peak instead.
    assert results(job_dir(tmp_path, 0))["peak_rss_bytes"] is None
    logged = tags(job_dir(tmp_path, 0))
    assert "memory/peak_bytes" in logged and "memory/peak_rss_bytes" not in logged


def test_a_diverged_job_stays_a_row_marked_diverged(tmp_path, train_cli):
    done = train_cli("-m", "steps=20", "optimizer.lr=5e-6,1", f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert rows["#0"].endswith(" completed") and rows["#1"].endswith(" diverged (exit 1)")
    assert re.search(r"^did not complete: #1 diverged \(exit 1\): non-finite ", done.stdout,
                     re.MULTILINE)


@pytest.mark.slow
def test_a_joblib_sweep_with_a_refused_job_reports_and_its_jobs_own_peak_rss(tmp_path):
    done = subprocess.run(
        [sys.executable, TRAIN, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         "steps=3", "ops.legendre_p3=custom,no_such_module:fn", f"hydra.sweep.dir={tmp_path}"],
        cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert rows["#0"].endswith(" completed") and rows["#1"].endswith(" failed (exit 2)")
    assert re.search(r"^did not complete: #1 failed \(exit 2\): config error: "
                     r"ops.legendre_p3=no_such_module:fn: .*no module no_such_module in the current dir", done.stdout,
                     re.MULTILINE)
    assert results(job_dir(tmp_path, 0))["peak_rss_bytes"] > 0
    assert "memory/peak_rss_bytes" in tags(job_dir(tmp_path, 0))
