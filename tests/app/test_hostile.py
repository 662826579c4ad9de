"""Hostile input, each case as a hostile but realistic user meets it: a run dir planted with code,
links, dirs and crafted files; user code that misbehaves only in training; absurd values;
errors of the environment. No code from the dir runs, no file outside it changes, no traceback,
no hang, no exit 0 for a run that did not finish, nothing already written is lost."""

import os
import shlex
import shutil
import signal
import subprocess
import sys

import pytest
import torch
import yaml

from fitting.tasks import Poly3Task
from tests.helpers.train_cli import REPO, TRAIN, user_env
from tests.train.helpers import go, results, signal_at

EVIL = '''import pathlib
pathlib.Path(__file__).with_name("MARKER").write_text("imported")
def f(x):
    return 0.5 * (5 * x**3 - 3 * x)
'''


def files(out):
    return {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def one_line(done, code):
    assert (done.returncode, done.stderr.count("\n")) == (code, 1), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return done.stderr


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    go(out, "steps=6", "ckpt.every=3")
    return out


@pytest.fixture
def planted(finished, tmp_path, monkeypatch):
    """A copy of a finished run in a dir that also holds evilmod.py, importable."""
    (tmp_path / "evilmod.py").write_text(EVIL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EVIL", "evilmod:f")
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("form", [
    "ops={legendre_p3:'evilmod:f'}", "+ops={legendre_p3:'evilmod:f'}",
    "++ops.legendre_p3=evilmod:f", "task.ops.legendre_p3=evilmod:f",
    "ops.legendre_p3={_target_:evilmod.f,_partial_:true}", "ops.legendre_p3=${oc.env:EVIL}",
    "+evil=evilmod:f", "optimizer={_target_:evilmod.f}"])
def test_resume_imports_nothing_the_run_dir_names_in_any_form(form, planted, train_cli):
    (planted / "checkpoint.pt").unlink()
    with open(planted / ".hydra" / "overrides.yaml", "a") as f:
        f.write(yaml.safe_dump([form]))
    before = files(planted)
    line = one_line(train_cli(f"resume={planted}", "steps=9"), 2)
    assert line.startswith(f"config error: {planted} names ops or code of yours ({form})")
    assert line.endswith(f"if you trust it: python train.py resume={planted} {shlex.quote(form)}\n")
    assert not (planted.parent / "MARKER").exists() and files(planted) == before


@pytest.mark.parametrize("crafted", ["alias bomb", "2 MB"])
def test_a_crafted_config_yaml_is_one_line_at_once(crafted, planted, train_cli):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(12))
    (planted / ".hydra" / "config.yaml").write_text(
        bomb if crafted == "alias bomb" else "seed: 0\n" * (1 << 18))
    line = one_line(train_cli(f"resume={planted}", "steps=9"), 2)
    assert line.startswith(f"config error: {planted / '.hydra' / 'config.yaml'} ")
    assert ("an alias" if crafted == "alias bomb" else "is over 1048576 bytes") in line
    assert results(planted)["status"] == "completed"


@pytest.mark.parametrize("resume", [False, True])
def test_a_planted_run_lock_link_changes_nothing_outside_the_dir(resume, planted, tmp_path,
                                                                 train_cli):
    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    out = planted if resume else tmp_path / "new"
    out.mkdir(exist_ok=True)
    (out / "run.lock").symlink_to(precious)
    done = train_cli(*([f"resume={out}", "steps=9"] if resume else [f"hydra.run.dir={out}"]))
    assert one_line(done, 2) == (f"config error: {out / 'run.lock'} is a link, where the app keeps"
                                 " its own; it is never followed nor replaced: remove it, or run "
                                 "in another dir\n")
    assert precious.read_text() == "mine" and (out / "run.lock").is_symlink()


def test_a_planted_figure_link_is_replaced_not_followed(tmp_path, train_cli):
    precious, out = tmp_path / "precious.png", tmp_path / "run"
    precious.write_bytes(b"mine")
    out.mkdir()
    (out / "fit_step000005.png").symlink_to(precious)  # the end figure of a 5-step run
    assert train_cli("steps=5", f"hydra.run.dir={out}").returncode == 0
    assert precious.read_bytes() == b"mine" and not (out / "fit_step000005.png").is_symlink()


def test_a_planted_profile_trace_link_is_replaced_not_followed(tmp_path, train_cli):
    precious, out = tmp_path / "precious.json", tmp_path / "run"
    precious.write_text("mine")
    out.mkdir()
    (out / "profile.pt.trace.json").symlink_to(precious)
    assert train_cli("steps=6", "profile=true", f"hydra.run.dir={out}").returncode == 0
    assert precious.read_text() == "mine" and not (out / "profile.pt.trace.json").is_symlink()
    assert '"traceEvents"' in (out / "profile.pt.trace.json").read_text()


def test_planted_event_file_links_are_not_followed(tmp_path, train_cli, monkeypatch):
    """Links under every name TensorBoard's own naming (time, host, pid, a count) would give."""
    from tensorboard.summary.writer import event_file_writer

    monkeypatch.setattr(event_file_writer.time, "time", lambda: 1_800_000_000.0)
    monkeypatch.setattr(event_file_writer.socket, "gethostname", lambda: "host")
    precious, out = tmp_path / "precious", tmp_path / "run"
    precious.write_text("mine")
    out.mkdir()
    for count in range(3000):
        (out / f"events.out.tfevents.1800000000.host.{os.getpid()}.{count}").symlink_to(precious)
    assert train_cli("steps=5", f"hydra.run.dir={out}").returncode == 0
    assert precious.read_text() == "mine"
    (written,) = [p for p in out.glob("events.out.tfevents.*") if not p.is_symlink()]
    assert written.stat().st_size > 0


@pytest.mark.parametrize("name", ["checkpoint.pt", "results.json", ".hydra", "train.log"])
def test_a_dir_or_link_where_a_file_belongs_is_refused_and_nothing_changes(name, planted, tmp_path,
                                                                           train_cli):
    if name == ".hydra":
        shutil.move(planted / ".hydra", tmp_path / "elsewhere")
        (planted / ".hydra").symlink_to(tmp_path / "elsewhere")
    elif name == "train.log":  # Hydra opens it (appending) before the app: nothing written
        (tmp_path / "precious.txt").write_text("mine")
        (planted / name).unlink(missing_ok=True)  # run() made this run: Hydra writes none
        (planted / name).symlink_to(tmp_path / "precious.txt")
    else:
        (planted / name).unlink()
        (planted / name).mkdir()
    before = files(planted)
    line = one_line(train_cli("steps=6", "ckpt.every=3", f"hydra.run.dir={planted}"), 2)
    assert line.startswith(f"config error: {planted / name} is a ")
    assert files(planted) == before


def test_files_are_written_with_the_users_umask(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, TRAIN, "steps=3", f"hydra.run.dir={out}"], cwd=REPO,
                          env=user_env(), capture_output=True, preexec_fn=lambda: os.umask(0o077))
    assert done.returncode == 0, done.stderr
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()}
    assert modes["results.json"] == modes["checkpoint.pt"] == modes["config.yaml"] == 0o600, modes
    assert all(mode & 0o077 == 0 for mode in modes.values()), modes


def test_a_printed_resume_command_is_safe_to_paste(tmp_path, train_cli, monkeypatch):
    out = tmp_path / "x_$(touch PWNED)_`touch PWNED2`_'q'\"d\"_a\nb\tc"
    signal_at(monkeypatch, Poly3Task, 3, signal.SIGTERM)
    quoted = str(out).replace("'", "\\'")  # for Hydra's grammar
    stopped = train_cli("steps=8", f"hydra.run.dir='{quoted}'")
    assert stopped.returncode == 128 + signal.SIGTERM and (out / "checkpoint.pt").is_file()
    command = stopped.stderr.rsplit("resume with: ", 1)[1].removesuffix("\n")
    pasted = subprocess.run(["bash", "-c", "printf '%s\\0' " + command.split(" ", 2)[2]],
                            cwd=tmp_path, capture_output=True, check=True).stdout
    assert pasted.split(b"\0")[0].decode() == shlex.split(command)[2]
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()
    monkeypatch.undo()
    resumed = train_cli(*shlex.split(command)[2:])
    assert resumed.returncode == 0, resumed.stderr
    assert results(out)["status"] == "completed" and results(out)["step"] == 8


OPS = '''import os, sys, threading, torch
calls = 0
def relu(x):
    """relu; misbehaves only at the mlp's training batch (256), from its 7th call (step 3)."""
    global calls
    calls += x.shape[0] == 256
    if calls >= 7:
        HOW
    return torch.relu(x)
'''
MISDEEDS = {"raises": "raise ValueError('only at the training batch size')",
            "grad_off": "torch.set_grad_enabled(False)", "sys_exit": "sys.exit(0)",
            "os_exit": "os._exit(0)"}
SAID = {"raises": "ValueError: only at the training batch size", "grad_off": "does not require grad",
        "sys_exit": "SystemExit: 0", "os_exit": "it called os._exit(0)"}


@pytest.mark.parametrize("how", MISDEEDS)
def test_an_op_that_misbehaves_only_in_training_is_one_line_and_keeps_the_checkpoint(
        how, tmp_path, train_cli, monkeypatch):
    module = f"bad_ops_{how}"  # a fresh module (its call count) for each case
    (tmp_path / f"{module}.py").write_text(OPS.replace("HOW", MISDEEDS[how]))
    args, out = ["task=mlp", "steps=8", "ckpt.every=2", f"ops.activation={module}:relu"], \
        tmp_path / "run"
    if how == "os_exit":  # in its own process: were os._exit to run, it would end pytest's
        done = subprocess.run([sys.executable, TRAIN, *args, f"hydra.run.dir={out}"],
                              cwd=tmp_path, env={**user_env(), "PYTHONPATH": str(REPO)},
                              capture_output=True, text=True, timeout=300)
    else:
        monkeypatch.syspath_prepend(str(tmp_path))
        done = train_cli(*args, f"hydra.run.dir={out}")
        assert torch.is_grad_enabled()
    line = one_line(done, 1)
    assert line.startswith(f"your op (ops.activation={module}:relu @") and \
        " failed in training at step 3, not in its pre-check: " in line, line
    assert f"the last good checkpoint is {out / 'checkpoint.pt'} (after step 2)" in line
    assert SAID[how] in line, line
    assert results(out)["status"] == "failed" and torch.load(
        out / "checkpoint.pt", weights_only=True)["step"] == 2


def test_an_op_module_that_calls_os_exit_as_it_is_imported_is_one_line(tmp_path):
    (tmp_path / "exits.py").write_text("import os\nos._exit(0)\n")
    done = subprocess.run([sys.executable, TRAIN, "task=mlp", "ops.activation=exits:relu",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                          env={**user_env(), "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300)
    assert one_line(done, 2) == ("config error: ops.activation=exits:relu: it called os._exit(0);"
                                 " an op returns or raises\n")
    assert not (tmp_path / "run").exists()


def test_an_op_in_a_sweep_that_fails_in_training_is_its_jobs_line_and_the_rest_run(
        tmp_path, train_cli, monkeypatch):
    (tmp_path / "sweep_ops.py").write_text(OPS.replace("HOW", MISDEEDS["raises"]))
    monkeypatch.syspath_prepend(str(tmp_path))
    done = train_cli("-m", "task=mlp", "steps=8", "ops.activation=sweep_ops:relu,builtin",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert "Traceback" not in done.stderr and done.stderr.count("your op (") == 1, done.stderr
    jobs = sorted((tmp_path / "sweep").glob("[0-9]_*"))
    assert [results(job)["status"] for job in jobs] == ["failed", "completed"]


@pytest.mark.slow
def test_an_op_in_a_joblib_sweep_that_fails_in_training_is_one_line_and_a_row(tmp_path):
    (tmp_path / "joblib_ops.py").write_text(OPS.replace("HOW", MISDEEDS["raises"]))
    done = subprocess.run([sys.executable, TRAIN, "-m", "hydra/launcher=joblib", "task=mlp",
                           "steps=8", "ops.activation=joblib_ops:relu,builtin",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path,
                          env={**user_env(), "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in done.stdout + done.stderr and done.stderr.count("\n") == 1
    assert done.stderr.startswith("your op (ops.activation=joblib_ops:relu @")  # the exit: g44's
    jobs = sorted((tmp_path / "sweep").glob("[0-9]_*"))
    assert [results(job)["status"] for job in jobs] == ["failed", "completed"]


THREADED = ("import threading, time, torch\nthreading.Thread(target=time.sleep, args=(3600,), "
            "name='forever').start()\nrelu = torch.relu\n")  # not daemon: Python's exit waits
LEFT = ("your code left threads running (forever): the process ends without waiting for them; "
        "start them with daemon=True, or join them")


def test_an_op_module_that_leaves_a_thread_running_does_not_hang_the_process(tmp_path):
    (tmp_path / "threaded.py").write_text(THREADED)
    done = subprocess.run([sys.executable, TRAIN, "task=mlp", "steps=3", "ops.activation="
                           "threaded:relu", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                          env={**user_env(), "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300)
    assert one_line(done, 1) == LEFT + "\n"


@pytest.mark.parametrize("launcher", ["basic", pytest.param("joblib", marks=pytest.mark.slow)])
def test_a_sweeps_job_that_leaves_a_thread_running_is_a_row_and_the_sweep_ends(launcher,
                                                                              tmp_path):
    (tmp_path / "threaded.py").write_text(THREADED)
    done = subprocess.run([sys.executable, TRAIN, "-m", f"hydra/launcher={launcher}",
                           "task=mlp", "steps=3", "ops.activation=threaded:relu,builtin",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path,
                          env={**user_env(), "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert f"did not complete: #0 failed (exit 1): {LEFT}" in done.stdout.splitlines()
    jobs = sorted((tmp_path / "sweep").glob("[0-9]_*"))
    assert [results(job)["status"] for job in jobs] == ["failed", "completed"]


@pytest.mark.parametrize("arg, line", [
    ("threads=100000", f"threads must be <= {os.cpu_count()} (this machine's cores), got 100000"),
    (f"steps={2**70}", f"steps must be <= {2**63 - 1} (a step TensorBoard holds), got {2**70}")])
def test_absurd_values_are_one_line(arg, line, tmp_path, train_cli):
    done = train_cli(arg, f"hydra.run.dir={tmp_path / 'run'}")
    assert one_line(done, 2) == f"config error: {line}\n" and not (tmp_path / "run").exists()


@pytest.mark.parametrize("crafted", ["step 2**70", "NaN weights", "2**64 shared refs", "a loop"])
def test_a_crafted_checkpoint_is_never_the_last_good_one(crafted, planted, train_cli):
    payload = torch.load(planted / "checkpoint.pt", weights_only=True)
    if crafted == "NaN weights":
        next(iter(payload["model"].values())).fill_(float("nan"))
    elif crafted == "2**64 shared refs":  # a few hundred bytes; a walk of every path never ends
        nested: list = []
        for _ in range(64):
            nested = [nested, nested]
        payload["config"]["task"]["init"] = nested
    elif crafted == "a loop":
        loop: list = []
        loop.append(loop)
        payload["config"]["task"]["init"] = loop
    else:
        payload["step"] = payload["loop"]["step"] = payload["config"]["steps"] = 2**70
    torch.save(payload, planted / "checkpoint.pt")
    before = files(planted)
    line = one_line(train_cli(f"resume={planted}", "steps=9"), 2)
    assert line.startswith(f"config error: {planted / 'checkpoint.pt'} holds ")
    assert ("non-finite weights" if crafted == "NaN weights" else "crafted or foreign") in line
    assert files(planted) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_runs_end_is_its_exit_code_and_the_results_are_whole(
        signum, tmp_path, train_cli, monkeypatch):
    figure = Poly3Task.figure

    def signalled(self, *args):
        signal.raise_signal(signum)
        return figure(self, *args)

    monkeypatch.setattr(Poly3Task, "figure", signalled)
    out = tmp_path / "run"
    line = one_line(train_cli("steps=5", f"hydra.run.dir={out}"), 128 + signum)
    assert line == (f"stopped by {signal.Signals(signum).name} at the run's end, its results "
                    f"whole: {out / 'results.json'}\n")
    assert results(out)["status"] == "completed" and results(out)["step"] == 5


def test_a_slurm_submission_refused_is_one_line(tmp_path, train_cli, monkeypatch):
    """A fake sbatch on PATH answers as SLURM does for hydra.launcher.partition=nope."""
    (tmp_path / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: invalid partition specified: nope' >&2\necho 'sbatch: "
        "error: Batch job submission failed: Invalid partition name specified' >&2\nexit 1\n")
    (tmp_path / "srun").write_text("#!/bin/sh\n")  # submitit looks for it
    for name in ("sbatch", "srun"):
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    done = train_cli("-m", "hydra/launcher=slurm", "hydra.launcher.partition=nope",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[0] == (
        "SLURM refused the sweep's jobs: sbatch: error: Batch job submission failed: Invalid "
        "partition name specified; check hydra.launcher.*"), done.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and "
                    "setpriv to drop the capabilities that let root enter any dir")
def test_another_users_0700_dir_is_one_line(tmp_path_factory):
    """Root without CAP_DAC_OVERRIDE/READ_SEARCH meets permissions as another user does."""
    shared = tmp_path_factory.mktemp("shared")
    secret = shared / "secret"
    (secret / "run").mkdir(parents=True)
    shutil.chown(secret, "nobody")
    secret.chmod(0o700)
    lines = {}
    for arg in (f"hydra.run.dir={secret / 'new'}", f"resume={secret / 'run'}"):
        done = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                               sys.executable, TRAIN, "steps=3", arg], cwd=REPO,
                              env=user_env(), capture_output=True, text=True, timeout=120)
        lines[arg.split("=")[0]] = one_line(done, 74 if arg.startswith("hydra") else 2)
    assert lines["hydra.run.dir"] == f"could not write {secret / 'new'}: Permission denied\n"
    assert lines["resume"] == (f"config error: resume={secret / 'run'}: {secret / 'run'} cannot "
                               "be entered (permission denied: another user's dir?)\n")
