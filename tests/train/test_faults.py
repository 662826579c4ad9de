"""Faults a run meets, each as a user sees it: a full disk halfway through a checkpoint, a
crafted checkpoint, a tampered overrides.yaml that would run code, a user's op that draws random
numbers, SLURM's requeue after the USR2 handover, and TensorBoard holding what the console says."""

import errno
import logging
import os
import pickle
import shlex
import shutil
import signal

import numpy as np
import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.checkpoint
from fitting.config import ConfigError
from fitting.loop import Stopped
from fitting.tasks import Poly3Task
from tests.train.helpers import go, results, same_weights, saved, signal_at


def test_a_full_disk_halfway_through_a_checkpoint_keeps_the_last_good_one(tmp_path, monkeypatch):
    out, write, written = tmp_path / "run", fitting.checkpoint.write_atomic, []

    def full_disk_at_the_second(path, data):
        def half(f):
            f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        written.append(path)
        write(path, data if len(written) == 1 else half)

    monkeypatch.setattr(fitting.checkpoint, "write_atomic", full_disk_at_the_second)
    with pytest.raises(Stopped) as stop:
        go(out, "steps=40", "ckpt.every=10")
    ckpt = out / "checkpoint.pt"
    assert stop.value.args == (
        f"could not write {ckpt}: No space left on device; the last good checkpoint is {ckpt} "
        f"(after step 10); resume with: python train.py resume={out}", 74)
    assert saved(out)["step"] == 10 and sorted(p.name for p in out.glob("*checkpoint*")) == [
        "checkpoint.pt"]  # whole, and no temporary file left
    monkeypatch.undo()
    assert go(out, f"resume={out}", "steps=40") == go(tmp_path / "whole", "steps=40")
    assert same_weights(out, tmp_path / "whole")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    go(out, "steps=10", "ckpt.every=5")
    return out


def crafted(payload, key, value):
    if key == "loop":
        payload["loop"]["unknown"] = 1
    elif key == "model":
        payload["model"]["a"] = torch.zeros(3)
    else:
        payload[key] = payload["loop"][key] = value


@pytest.mark.parametrize("key, value, message", [
    ("loop", None, "holds keys or values this app does not write"),
    ("step", -1000, "holds keys or values this app does not write"),
    ("step", 2.5, "holds keys or values this app does not write"),
    ("model", None, "does not fit this task or optimizer"),
], ids=["unknown-loop-key", "negative-step", "float-step", "wrong-shape"])
def test_a_crafted_checkpoint_is_refused_in_one_line(key, value, message, finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    payload = torch.load(out / "checkpoint.pt", weights_only=True)
    crafted(payload, key, value)
    torch.save(payload, out / "checkpoint.pt")
    with pytest.raises(ConfigError, match=message) as refused:
        go(out, f"resume={out}", "steps=20")
    assert "\n" not in str(refused.value) and str(refused.value).endswith("not resumed")
    assert results(out)["step"] == 10  # nothing ran


class Pickled:
    """What torch.load(weights_only=False) would run: a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_resume_imports_no_op_the_run_dir_names_until_the_command_line_repeats_it(finished,
                                                                                    tmp_path):
    out, marker = tmp_path / "run", tmp_path / "marker"
    shutil.copytree(finished, out)
    (out / "evil.pt").write_bytes(pickle.dumps(Pickled(marker)))
    op = f"ops.legendre_p3={{_target_:torch.load,f:'{out}/evil.pt',weights_only:false}}"
    with open(out / ".hydra" / "overrides.yaml", "a") as f:
        f.write(yaml.safe_dump([op]))
    config = yaml.safe_load((out / ".hydra" / "config.yaml").read_text())
    config["ops"]["legendre_p3"] = {"_target_": "torch.load", "f": f"{out}/evil.pt",
                                    "weights_only": False}
    (out / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as refused:
        go(out, f"resume={out}", "steps=20")
    assert f"if you trust it: python train.py resume={out} {shlex.quote(op)}" in str(refused.value)
    assert not marker.exists() and results(out)["step"] == 10


RNG_OPS = '''import torch

def noisy_relu(x):
    """relu with noise, at the mlp's batch of 256 only: the pre-check sees a plain relu."""
    return torch.relu(x) * (1 + 0.1 * torch.rand_like(x)) if x.shape[0] == 256 else torch.relu(x)
'''


def test_a_user_op_that_draws_random_numbers_resumes_bit_identical(tmp_path, monkeypatch):
    (tmp_path / "rng_ops.py").write_text(RNG_OPS)
    monkeypatch.chdir(tmp_path)
    run = ("task=mlp", "scheduler=none", "ops.activation=rng_ops:noisy_relu")
    whole = go(tmp_path / "whole", *run, "steps=30")
    assert whole != go(tmp_path / "plain", *run[:2], "steps=30")  # the noise is drawn
    go(tmp_path / "parts", *run, "steps=12")
    with pytest.raises(ConfigError, match="if you trust it"):  # your op, named again
        go(tmp_path / "parts", f"resume={tmp_path / 'parts'}", "steps=30")
    resumed = go(tmp_path / "parts", f"resume={tmp_path / 'parts'}", "steps=30", run[2])
    assert resumed == whole and same_weights(tmp_path / "whole", tmp_path / "parts")


def test_submitits_sigterm_after_the_usr2_handover_is_its_own(tmp_path, monkeypatch):
    calls = []

    def submitit_requeue(signum, frame):  # submitit's: `scontrol requeue` sends the job SIGTERM
        calls.append(signum)
        signal.raise_signal(signal.SIGTERM)

    handlers = {s: signal.signal(s, h) for s, h in (
        (signal.SIGUSR2, submitit_requeue), (signal.SIGTERM, lambda s, f: calls.append(s)))}
    try:
        signal_at(monkeypatch, Poly3Task, 4, signal.SIGUSR2)
        with pytest.raises(Stopped) as stop:
            go(tmp_path / "run", "steps=40")
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert calls == [signal.SIGUSR2, signal.SIGTERM]  # submitit's bypass, not a second signal
    assert stop.value.args[0].startswith("interrupted by SIGUSR2 after 5 of 40 steps")
    assert stop.value.args[1] == 128 + signal.SIGUSR2


def losses(out):
    """loss/train as TensorBoard reads it back: [(step, value)]."""
    acc = EventAccumulator(str(out))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("loss/train")]


def test_tensorboard_holds_what_the_console_says(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    final = go(tmp_path / "run", "steps=23", "log.every=5")
    logged = losses(tmp_path / "run")
    assert [step for step, _ in logged] == [0, 5, 10, 15, 20, 22]  # the last step too
    assert logged[-1][1] == np.float32(final) == np.float32(results(tmp_path / "run")["final_loss"])
    assert f"final loss {final:.6g} after 23 steps" in caplog.text
    assert dict(logged)[10] == np.float32(go(tmp_path / "eleven", "steps=11"))


@pytest.mark.parametrize("stop", ["signal", "converged"])
def test_the_last_step_is_logged_whatever_stopped_the_run(stop, tmp_path, monkeypatch):
    if stop == "signal":
        signal_at(monkeypatch, Poly3Task, 13, signal.SIGTERM)
        with pytest.raises(Stopped):
            go(tmp_path / "run", "steps=40", "log.every=5")
    else:
        go(tmp_path / "run", "optimizer=lbfgs", "dtype=float64", "log.every=5")
    done = results(tmp_path / "run")
    assert done["status"] == ("interrupted" if stop == "signal" else "converged")
    assert losses(tmp_path / "run")[-1] == (done["step"] - 1, np.float32(done["final_loss"]))
