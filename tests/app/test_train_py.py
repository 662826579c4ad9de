"""`python train.py` as a user runs it: config errors, --help, a sweep's resume, and a real
process stopped by SIGTERM that resumes bit-identical."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from fitting.slots import SLOTS
from tests.helpers.train_cli import REPO, TRAIN, user_env
from tests.train.helpers import go, same_weights


@pytest.mark.parametrize("args, message", [
    (["steps=0"], "steps must be >= 1, got 0"),
    (["+foo=1"], "unknown key foo"),
    (["task=mlp", "step=500"], "unknown key step: did you mean steps?"),  # not Hydra's +step=
    (["log.evry=5"], "unknown key log.evry: did you mean log.every?"),
    (["task=mlp", "task.hidden=[64,0]"], "task.hidden must be"),
    (["ops.legendre_p3=no_such_module:fn"],  # where it was looked for
     f"no module no_such_module in the current dir ({REPO}) or on PYTHONPATH ("),
    (["task=mlp", "ops.activation=torch.nn.functional.silu"],  # a dot for the colon
     "; did you mean torch.nn.functional:silu?"),
    (["task=mlp", "task.target=" + "x" * 200_000], "task.target must be"),
    (["task.n_points=1000000000000"], "the task does not fit in memory ("),
    (["task=mlp", "optimizer.lr=1e309"], "optimizer.lr must be a finite number, got inf"),
    (["optimizer.lr=nan"], "optimizer.lr must be a finite number, got nan"),
])
def test_a_config_error_is_one_line_exit_2_and_leaves_no_run_dir(args, message, tmp_path,
                                                                  train_cli):
    done = train_cli(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    assert done.stderr.startswith("config error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1 and len(done.stderr) < 400  # a huge value is cut
    assert not (tmp_path / "run").exists()


def test_hydras_own_composition_errors_leave_no_run_dir(tmp_path, train_cli):
    done = train_cli("optimizer=lbfgs", "optimizer.lr=1", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode != 0 and "optimizer.lr" in done.stderr  # lbfgs takes no lr
    assert not (tmp_path / "run").exists()


def test_resume_in_a_sweep_is_one_line(train_cli):
    done = train_cli("-m", "resume=outputs/some/run")
    assert (done.returncode, done.stderr.count("resume=")) == (2, 1)


def test_help_lists_the_choices_and_keys(train_cli):
    done = train_cli("--help")
    assert done.returncode == 0
    task, optimizer, experiment = ("|".join(sorted(p.stem for p in (REPO / "conf" / group).glob(
        "*.yaml"))) for group in ("task", "optimizer", "experiment"))
    for text in (f"task={task}", f"optimizer={optimizer}", f"+experiment={experiment}",
                 f"slots: {', '.join(SLOTS)}", "log.memory_every", "ckpt.every",
                 "stop.patience", "resume=<run dir>", "ops.<slot>="):
        assert text in done.stdout
    assert "task_optimizer=" not in done.stdout


def test_an_optimizer_without_an_lr_for_the_task_is_one_line_naming_the_file(train_cli, tmp_path):
    (tmp_path / "optimizer").mkdir()  # a new optimizer, no conf/task_optimizer/<task>_<it>.yaml
    (tmp_path / "optimizer" / "new.yaml").write_text(
        "_target_: torch.optim.RMSprop\n_partial_: true\nlr: ???\n")
    done = train_cli("--config-dir", str(tmp_path), "optimizer=new",
                     f"hydra.run.dir={tmp_path / 'run'}")
    assert (done.returncode, done.stderr) == (2, (
        "config error: optimizer.lr is not set for this task and optimizer: add "
        "conf/task_optimizer/poly3_new.yaml (lr: ...) or give optimizer.lr=\n"))
    assert not (tmp_path / "run").exists()


def test_sigterm_checkpoints_and_the_resumed_run_ends_bit_identical(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, TRAIN, "steps=1000000", "ckpt.every=0", f"hydra.run.dir={out}"],
        cwd=REPO, env=user_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("events.out.tfevents.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # some steps into the run
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)  # a deadline, wide for a loaded box
    assert process.returncode == 128 + signal.SIGTERM
    step = json.loads((out / "results.json").read_text())["step"]
    assert stderr.strip().endswith(f"resume with: python train.py resume={out}")
    assert f"interrupted by SIGTERM after {step} of 1000000 steps" in stderr
    assert not (out / "run.lock").exists() and step > 0
    resumed = go(out, f"resume={out}", f"steps={step + 20}")
    assert resumed == go(tmp_path / "whole", f"steps={step + 20}")
    assert same_weights(out, tmp_path / "whole")
    assert os.path.getsize(out / ".hydra" / "overrides.yaml") > 0


def test_a_sweep_prints_a_line_per_job_start_and_end_and_the_tensorboard_line_at_its_end(
        tmp_path, train_cli):
    done = train_cli("-m", "steps=3", "impl=custom,builtin", f"hydra.sweep.dir={tmp_path}")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == (  # nothing of Hydra's, no progress lines
        f"job 1 of 2: steps=3 impl=custom; run dir: {tmp_path}/0_impl=custom,steps=3")
    assert re.fullmatch(r"job 1 of 2 ended: completed, final loss [\d.e+-]+; "
                        r"\d\d:\d\d left in the sweep", lines[1])
    assert lines[2] == f"job 2 of 2: steps=3 impl=builtin; run dir: {tmp_path}/1_impl=builtin,steps=3"
    assert re.fullmatch(r"job 2 of 2 ended: completed, final loss [\d.e+-]+", lines[3])
    # The job's own lines, with their [date][logger][level] prefix, in its log file only.
    log = (tmp_path / "0_impl=custom,steps=3" / "train.log").read_text().splitlines()
    assert re.match(r"\[[-\d :,]+\]\[fitting.run\]\[INFO\] - task=poly3 ", log[1])
    assert any("3/3 steps (100%)" in line for line in log)
    table = [line for line in lines if line.endswith("  completed")]
    assert "Result:" not in done.stdout and len(table) == 2  # the table
    assert done.stdout.count("tensorboard --logdir") == 1
    assert done.stdout.rstrip().endswith(f"tensorboard --logdir {tmp_path}")


def test_a_run_names_its_dir_first_and_its_console_has_no_prefix_nor_profiler_lines(tmp_path):
    """profile=true and CPU memory peaks run torch's profiler: its USDT lines and the CPU
    allocator's warning (C++ output, so a real process) are not shown."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, TRAIN, "task=mlp", "steps=6", "profile=true", "log.memory_every=2",
         f"hydra.run.dir={out}"], cwd=REPO, env=user_env(), capture_output=True, text=True,
        timeout=300)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0 and done.stdout.startswith(f"run dir: {out}\n")
    assert [line for line in lines if re.match(r"\[|USDT|STAGE|\[W", line)
            or "CPUAllocator" in line] == []
    assert any(line.startswith("profile of steps 2-4: ") for line in lines)
    # Not a terminal: no progress lines on the console; the run's log file has them.
    assert not [line for line in lines if re.match(r"\d+/6 steps", line)]
    assert "6/6 steps (100%)" in (out / "train.log").read_text()


def test_resume_of_a_sweeps_dir_names_its_runs(tmp_path, train_cli):
    for job in ("0_seed=0", "1_seed=1"):
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "config.yaml").write_text("seed: 0\n")
    done = train_cli(f"resume={tmp_path}")
    assert (done.returncode, done.stderr) == (2, f"config error: resume={tmp_path}: {tmp_path} "
                                                 "holds no run; its runs: 0_seed=0, 1_seed=1\n")


def test_readmes_my_ops_are_in_docs_examples(monkeypatch):
    """README's `my_ops:<name>` examples, with docs/examples on the path as README says."""
    from fitting.opcheck.boundary import load

    monkeypatch.syspath_prepend(str(REPO / "docs" / "examples"))
    # docs/examples' my_ops is imported here and gone after: other tests write their own my_ops.
    monkeypatch.setitem(sys.modules, "my_ops", None)
    del sys.modules["my_ops"]
    readme = (REPO / "README.md").read_text()
    assert "PYTHONPATH=docs/examples" in readme
    names = set(re.findall(r"my_ops:(\w+)", readme))
    assert {"swish", "leaky", "my_layer_norm", "samples"} <= names
    assert all(callable(load(f"my_ops:{name}")) for name in names)
