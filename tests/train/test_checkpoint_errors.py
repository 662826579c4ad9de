"""`python train.py resume=DIR` with a checkpoint.pt it cannot resume from (empty, truncated,
garbage, not this app's, another format, another task's model, another version's state or
config): one line naming the file and the command that starts afresh, exit 2, no traceback, and
the file left byte-identical."""

from __future__ import annotations

import copy
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fitting.train.checkpoint import FORMAT, load
from fitting.train.checkpoint_errors import CheckpointError
from tests.helpers.train_cli import run_train, user_env

REPO = Path(__file__).resolve().parents[2]
OVERRIDES = ["steps=5", "log.figure_every=0", "log.hist_every=0"]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """The dir of a finished 5-step run of `python train.py` (its .hydra/ included)."""
    run_dir = tmp_path_factory.mktemp("good") / "run"
    subprocess.run([sys.executable, "train.py", *OVERRIDES, f"hydra.run.dir={run_dir}"],
                   cwd=REPO, env=user_env(), check=True, capture_output=True)
    return run_dir


def edited(change):
    """A corruption that saves the good checkpoint's payload as `change` leaves it."""

    def write(path: Path) -> None:
        payload = copy.deepcopy(dict(torch.load(path, weights_only=True)))
        torch.save(change(payload), path)

    return write


class Evil:
    def __reduce__(self):
        return (print, ("ran code from the checkpoint",))


def _pop_log(payload):
    del payload["config"]["log"]
    return payload


def _rename_task(path: Path) -> None:
    """A run dir of another version, whose task this version does not have: its checkpoint
    and its .hydra/config.yaml name that task."""
    edited(_renamed)(path)
    config = path.parent / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("name: poly3", "name: quadratic", 1))


def _renamed(payload):
    payload["config"]["task"]["name"] = "quadratic"
    return payload


CASES = {
    "empty": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:3000]),
                  "is truncated (3000 bytes, its end is missing)"),
    "garbage": (lambda p: p.write_bytes(random.Random(0).randbytes(3000)),
                "is not a checkpoint of this app (not a file torch.save wrote)"),
    "code": (lambda p: torch.save({"format": FORMAT, "x": Evil()}, p),
             "is not a checkpoint of this app (loading it would build Python objects"),
    "state_dict": (edited(lambda d: d["model"]),
                   "is not a checkpoint of this app (torch.load reads it as OrderedDict, "
                   "without a 'format' key)"),
    "format": (edited(lambda d: dict(d, format=FORMAT + 1)),
               f"was written by an incompatible version of this app (checkpoint format "
               f"{FORMAT + 1}, this version reads format {FORMAT})"),
    "other_task": (edited(lambda d: dict(d, model={"layers.0.weight": torch.zeros(16, 1),
                                                   "layers.0.bias": torch.zeros(16)})),
                   "does not fit task=poly3 of this version of the app: its model has "
                   "layers.0.weight, layers.0.bias, the task's has a, b, c, d"),
    "other_loop": (edited(lambda d: dict(d, loop=dict(d["loop"], lr_schedule=1))),
                   "does not fit task=poly3 of this version of the app (RunState"),
    "other_config": (edited(_pop_log),
                     "was written by an incompatible version of this app: its config lacks "
                     "log.console_every, log.every"),
    "unknown_task": (_rename_task,
                     "was written by another version of this app: its task 'quadratic' is "
                     "not one of this version's (cnn, mlp, poly3)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_resume_from_a_bad_checkpoint_is_one_line(case, good_run, tmp_path, capfd, monkeypatch):
    corrupt, what = CASES[case]
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    ckpt = run_dir / "checkpoint.pt"
    corrupt(ckpt)
    before = ckpt.read_bytes()

    proc = run_train([f"resume={run_dir}", "steps=10"], capfd, monkeypatch)

    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith(f"config error: resume={run_dir}: {ckpt} {what}"), line
    assert line.endswith(
        "; start afresh (a new run dir) with: python train.py " + " ".join(OVERRIDES)
    ), line
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "ran code" not in proc.stdout + proc.stderr
    assert ckpt.read_bytes() == before


def test_load_names_what_is_wrong_in_process(tmp_path):
    """The same errors from checkpoint.load itself, with torch's error kept as the cause."""
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="is not a checkpoint of this app") as info:
        load(tmp_path)
    assert info.value.__cause__ is not None
    assert "start afresh (a new run dir) with: python train.py plus the run's overrides" in str(
        info.value
    )
