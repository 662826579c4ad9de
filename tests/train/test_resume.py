"""Resume and the run dir: bit-identical continuation, a restarted or requeued job that resumes
its own dir, a dir that holds another run, SLURM's SIGUSR2, a damaged checkpoint, a run dir that
is not whole, one that would run code, and the lock."""

import fcntl
import os
import shutil
import signal
import zipfile

import pytest
import torch
import yaml

from fitting.config import ConfigError
from fitting.loop import Stopped
from fitting.tasks import Poly3Task
from tests.train.helpers import go, results, same_weights, saved, signal_at

SMALL_CNN = ("task=cnn", "task.n_train=64", "task.n_val=16", "task.batch_size=8")


@pytest.mark.parametrize("overrides, steps, first", [
    (("log.every=7",), 40, 25),
    (("task=mlp", "scheduler=none"), 30, 12),  # a schedule spans its steps: tests/optim
    ((*SMALL_CNN, "scheduler=none"), 8, 3),
    (("optimizer=lbfgs", "dtype=float64", "stop.patience=0"), 8, 3),
    (("optimizer=newton", "dtype=float64"), 6, 2),
    (("optimizer=lm", "dtype=float64"), 6, 2),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_a_resumed_run_ends_bit_identical(overrides, steps, first, tmp_path):
    whole = go(tmp_path / "whole", *overrides, f"steps={steps}")
    go(tmp_path / "parts", *overrides, f"steps={first}")
    resumed = go(tmp_path / "parts", f"resume={tmp_path / 'parts'}", f"steps={steps}")
    assert resumed == whole and same_weights(tmp_path / "whole", tmp_path / "parts")
    assert saved(tmp_path / "parts")["optimizer"].keys() == saved(tmp_path / "whole")["optimizer"].keys()


def test_a_dir_holding_a_run_resumes_it_with_its_config_and_refuses_another(tmp_path, monkeypatch):
    signal_at(monkeypatch, Poly3Task, 15, signal.SIGTERM)
    with pytest.raises(Stopped) as stop:
        go(tmp_path / "run", "steps=40")
    assert stop.value.args[1] == 128 + signal.SIGTERM
    assert stop.value.args[0].startswith("interrupted by SIGTERM after 16 of 40 steps; the last "
                                      f"good checkpoint is {tmp_path / 'run' / 'checkpoint.pt'}")
    assert results(tmp_path / "run")["status"] == "interrupted"
    monkeypatch.undo()
    shutil.copytree(tmp_path / "run", tmp_path / "other")
    with pytest.raises(ConfigError, match=r"holds another run \(seed: 0 there, 1 here\); "
                                          r"continue that one with: python train.py resume="):
        go(tmp_path / "other", "steps=40", "seed=1")
    assert (tmp_path / "other" / "checkpoint.pt").is_file()  # refused, nothing overwritten
    requeued = go(tmp_path / "run", "steps=40")  # the same command again: a requeued job
    assert requeued == go(tmp_path / "whole", "steps=40")
    assert same_weights(tmp_path / "run", tmp_path / "whole")
    with pytest.raises(ConfigError, match="holds a finished run"):
        go(tmp_path / "run", "steps=40")


def test_a_second_signal_stops_at_once_naming_the_last_checkpoint(tmp_path, monkeypatch):
    signal_at(monkeypatch, Poly3Task, 12, signal.SIGTERM, times=2)
    with pytest.raises(Stopped) as stop:
        go(tmp_path / "run", "steps=40", "ckpt.every=10")
    assert stop.value.args == (
        "stopped at once by a second SIGTERM; the last good checkpoint is "
        f"{tmp_path / 'run' / 'checkpoint.pt'} (after step 10); resume with: python train.py "
        f"resume={tmp_path / 'run'}", 128 + signal.SIGTERM)
    assert not (tmp_path / "run" / "run.lock").exists()


def test_sigusr2_checkpoints_then_calls_the_handler_it_replaced(tmp_path, monkeypatch):
    calls = []

    def submitit_stand_in(signum, frame):  # submitit's requeues the job, then exits
        calls.append((signum, saved(tmp_path / "run")["step"], saved(tmp_path / "run")["status"]))

    previous = signal.signal(signal.SIGUSR2, submitit_stand_in)
    try:
        signal_at(monkeypatch, Poly3Task, 4, signal.SIGUSR2)
        with pytest.raises(Stopped) as stop:
            go(tmp_path / "run", "steps=40")
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert calls == [(signal.SIGUSR2, 5, "interrupted")]
    assert stop.value.args[1] == 128 + signal.SIGUSR2


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run dir of 10 finished steps, to copy and spoil."""
    out = tmp_path_factory.mktemp("finished") / "run"
    go(out, "steps=10")
    return out


def spoiled(finished, tmp_path, path, spoil):
    """A copy of `finished` with its file `path` spoiled by `spoil(file)`; the copy's dir."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    spoil(out / path)
    return out


def flip_a_weight_byte(path):
    with zipfile.ZipFile(path) as archive:
        entry = next(i for i in archive.infolist() if "/data/" in i.filename)
    with open(path, "r+b") as f:
        f.seek(entry.header_offset + 26)
        name_len, extra_len = (int.from_bytes(f.read(2), "little") for _ in range(2))
        f.seek(entry.header_offset + 30 + name_len + extra_len)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("path, spoil, message", [
    ("checkpoint.pt", flip_a_weight_byte, "fails its CRC check"),
    ("checkpoint.pt", lambda p: p.write_bytes(b""), "checkpoint.pt is empty"),
    ("checkpoint.pt", truncate, "checkpoint.pt is truncated"),
    (".hydra/config.yaml", os.remove, "config.yaml is missing"),
    (".hydra/config.yaml", lambda p: p.write_text(""), "config.yaml is empty"),
    (".hydra/config.yaml", truncate, "config.yaml .*(cannot be read|is not the run)"),
    (".hydra/config.yaml", lambda p: (os.remove(p), p.mkdir()), "config.yaml is a directory"),
    (".hydra/overrides.yaml", lambda p: p.write_text("{a: 1}"), "holds a dict, not a list"),
], ids=["crc", "empty", "truncated", "config-deleted", "config-empty", "config-truncated",
        "config-unreadable", "overrides-not-a-list"])
def test_a_run_dir_that_cannot_be_resumed_is_one_line(path, spoil, message, finished, tmp_path):
    out = spoiled(finished, tmp_path, path, spoil)
    before = (out / "checkpoint.pt").read_bytes() if (out / "checkpoint.pt").is_file() else None
    with pytest.raises(ConfigError, match=message) as refused:
        go(out, f"resume={out}", "steps=20")
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 400
    assert results(out)["step"] == 10  # nothing ran, nothing was written
    assert before is None or (out / "checkpoint.pt").read_bytes() == before


def test_resume_of_a_file_or_with_other_keys_is_refused(finished, tmp_path):
    with pytest.raises(ConfigError, match="is a file; give the run dir"):
        go(tmp_path / "new", f"resume={finished / 'checkpoint.pt'}")
    assert not (tmp_path / "new").exists()
    with pytest.raises(ConfigError, match="only steps, log.*, ckpt.*, .* got seed=1"):
        go(finished, f"resume={finished}", "steps=20", "seed=1")


def inject_into_overrides(out, code):
    (out / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"+task.evil={code}"]))


def inject_into_config(out, code):
    path = out / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["task"] = yaml.safe_load(code.replace(":", ": ").replace(",", ", "))
    path.write_text(yaml.safe_dump(config))


def inject_into_checkpoint(out, code):
    payload = torch.load(out / "checkpoint.pt", weights_only=True)
    payload["config"]["task"] = yaml.safe_load(code.replace(":", ": ").replace(",", ", "))
    torch.save(payload, out / "checkpoint.pt")


@pytest.mark.parametrize("inject", [inject_into_overrides, inject_into_config,
                                    inject_into_checkpoint])
def test_resume_runs_no_code_from_the_run_dir(inject, finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    marker = tmp_path / "marker"
    inject(out, f"{{_target_:builtins.open,file:{marker},mode:w}}")
    with pytest.raises(ConfigError, match="not resumed|if you trust it"):
        go(out, f"resume={out}", "steps=20")
    assert not marker.exists()


def test_a_run_dir_in_use_is_refused_naming_its_run(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with open(out / "run.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242")
        held.flush()
        with pytest.raises(ConfigError, match=r"in use by another run \(pid 4242\)"):
            go(out, "steps=5")
    assert not (out / "checkpoint.pt").exists()


def test_a_scheduled_run_is_not_extended_and_says_why(tmp_path):
    go(tmp_path / "run", "task=mlp", "steps=12")  # mlp's cosine schedule spans its 12 steps
    with pytest.raises(ConfigError, match=r"its lr schedule spans the run's own steps "
                                          r"\(scheduler.T_max: 12 there, 30 here\)"):
        go(tmp_path / "run", f"resume={tmp_path / 'run'}", "steps=30")
    assert results(tmp_path / "run")["step"] == 12  # untouched
