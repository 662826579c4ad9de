"""`python train.py ops.<op>=<module>:<name>` in subprocesses: a user's op trains and is recorded
(spec, source file, sha256); a bad one is one line, exit 2, nothing written; sweep dir names."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.train_cli import user_env

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "train.py")
MLP = ["task=mlp", "steps=3", "task.n_points=32", "task.n_val=8", "task.hidden=[8]",
       "log.figure_every=0"]

USER_OPS = '''
import torch


class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.clamp_min(0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return torch.where(out > 0, grad, 0)


def my_relu(x):
    return torch.relu(x)


not_callable = 3


def two_args(x, y):
    return x


def flat(x):
    return torch.relu(x).flatten()
'''


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """A dir holding user_ops.py (the ops above) and broken.py (fails at import)."""
    (tmp_path / "user_ops.py").write_text(USER_OPS)
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    return tmp_path


def train(*args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """`python train.py *args` from `cwd`, with `pythonpath` as PYTHONPATH (else none)."""
    env = {k: v for k, v in user_env().items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, TRAIN, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "where"), [("user_ops:MyReLU", "cwd"),
                                             ("user_ops:my_relu", "PYTHONPATH")])
def test_a_user_op_trains_and_is_recorded(user_dir, spec, where):
    run_dir = user_dir / "run"
    cwd, path = (user_dir, None) if where == "cwd" else (REPO, user_dir)
    proc = train(*MLP, f"ops.activation={spec}", f"hydra.run.dir={run_dir}", cwd=cwd, pythonpath=path)
    assert proc.returncode == 0, proc.stderr
    source = user_dir / "user_ops.py"
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    log = (run_dir / "train.log").read_text()
    assert f"task=mlp ops.linear=custom ops.activation={spec} optimizer=" in log
    assert f"ops.activation={spec}: source {source}, sha256 {sha}\n" in log
    assert (run_dir / "checkpoint.pt").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("ops.activation=nomod:my_relu", "no module named 'nomod' in the current directory ({cwd}) "
                                   "or on PYTHONPATH"),
        ("ops.activation=broken:f", "importing 'broken' failed: RuntimeError: boom at import"),
        ("ops.activation=user_ops:nope", "module 'user_ops' ({cwd}/user_ops.py) has no 'nope'"),
        ("ops.activation=user_ops:not_callable", "'not_callable' is a int, not callable; name a "
                                           "function or a torch.autograd.Function subclass"),
        ("ops.activation=user_ops:two_args", "wrong signature: calling it as activation(x) raised TypeError: "
                                       "two_args() missing 1 required positional argument: 'y'"),
        ("ops.activation=user_ops:flat", "wrong output on a reference input: shape (32,) torch.float32, expected (4, 8) "
                                   "torch.float32 (the builtin's on the same input)"),
        ("ops.linear=user_ops:my_relu", "wrong signature: calling it as linear(x, weight, bias) "
                                        "raised TypeError: my_relu() takes 1 positional argument "
                                        "but 3 were given"),
        ("ops.activation=user_ops", "expected custom, builtin or <module>:<name>, e.g. "
                              "ops.activation=my_ops:my_activation"),
    ],
)
def test_a_bad_user_op_is_one_line_and_writes_nothing(user_dir, key, message):
    run_dir = user_dir / "run"
    proc = train(*MLP, key, f"hydra.run.dir={run_dir}", cwd=user_dir)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"config error: {key}: {message.format(cwd=user_dir)}\n"
    assert sorted(p.name for p in run_dir.iterdir()) == [".hydra", "train.log"]
    assert "Traceback" not in (run_dir / "train.log").read_text()


@pytest.mark.slow
def test_sweep_job_dirs_name_each_ops_choice(user_dir):
    sweep = user_dir / "sweep"
    proc = train("-m", *MLP, "ops.activation=custom,builtin,user_ops:my_relu",
                 f"hydra.sweep.dir={sweep}", cwd=user_dir)
    assert proc.returncode == 0, proc.stderr
    dirs = sorted(p.name for p in sweep.iterdir() if (p / ".hydra").is_dir())
    # Hydra's override_dirname: the job's overrides, sorted.
    assert dirs == [
        f"{i}_" + ",".join(sorted([*MLP, f"ops.activation={spec}"]))
        for i, spec in enumerate(["custom", "builtin", "user_ops:my_relu"])
    ]
    assert "ops.activation=user_ops:my_relu" in dirs[2]
