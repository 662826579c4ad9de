"""Nothing lost when runs collide or files rot: an unknown `+key` is refused, one writer per run
dir, a damaged or foreign checkpoint is never trained on, a deleted event file is reported."""

import logging
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from fitting.train.checkpoint_errors import CheckpointError
from fitting.train.lock import run_dir_lock
from fitting.train.run import run
from fitting.train.validate import ConfigError
from tests.helpers.app_config import make_cfg

MLP = ("task=mlp", "task.hidden=[8]", "task.n_points=32", "task.n_val=16", "log.figure_every=0")


def test_a_plus_key_the_schema_lacks_is_refused_before_anything_is_written(tmp_path, train_cli):
    out = tmp_path / "run"
    done = train_cli(*MLP, "+task.hiden=[32]", "steps=3", f"hydra.run.dir={out}")
    assert done.returncode == 2
    assert done.stderr.startswith("config error: unknown key task.hiden (added with +?)")
    assert not (out / "checkpoint.pt").exists()


def test_a_second_run_in_a_live_run_dir_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid())"
         ".encode()); print('locked', flush=True); time.sleep(60)", str(out / "run.lock")],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=rf"is in use by another run \(pid {holder.pid}\)"):
            run(make_cfg(*MLP, "steps=3"), out)
        assert not (out / "checkpoint.pt").exists()
    finally:
        holder.kill()
        holder.wait()
    # The OS dropped the killed holder's lock: the dir is free again.
    assert run(make_cfg(*MLP, "steps=3"), out) > 0


def test_the_lock_is_released_when_the_run_ends(tmp_path):
    with run_dir_lock(tmp_path):
        pass
    with run_dir_lock(tmp_path):
        assert (tmp_path / "run.lock").read_text() == str(os.getpid())


def _interrupted_run(out: Path) -> None:
    """A finished short run whose checkpoint says it can be extended."""
    run(make_cfg(*MLP, "steps=4"), out)


def test_a_flipped_byte_in_a_weight_is_refused_and_the_file_kept(tmp_path):
    out = tmp_path / "run"
    _interrupted_run(out)
    ckpt = out / "checkpoint.pt"
    with zipfile.ZipFile(ckpt) as archive:  # the largest stored tensor: a weight matrix
        entry = max(archive.infolist(), key=lambda info: info.file_size)
    data = bytearray(ckpt.read_bytes())
    start = entry.header_offset + 200  # past the entry's local header, inside its bytes
    data[start : start + 40] = bytes(b ^ 0xFF for b in data[start : start + 40])
    ckpt.write_bytes(bytes(data))
    before = ckpt.read_bytes()
    with pytest.raises(CheckpointError, match="is damaged: its entry .* fails its CRC check"):
        run(make_cfg(*MLP, "steps=8", f"resume={out}"), out)
    assert ckpt.read_bytes() == before


def test_a_checkpoint_of_another_task_is_refused_in_the_run_dir(tmp_path, train_cli):
    mlp, poly3 = tmp_path / "mlp", tmp_path / "poly3"
    assert train_cli(*MLP, "steps=4", f"hydra.run.dir={mlp}").returncode == 0
    assert train_cli("steps=4", f"hydra.run.dir={poly3}").returncode == 0
    shutil.copy(mlp / "checkpoint.pt", poly3 / "checkpoint.pt")
    done = train_cli(f"resume={poly3}", "steps=8")
    assert done.returncode == 2
    assert "belongs to another run (task.name: 'mlp' in the checkpoint, 'poly3'" in done.stderr


def test_a_deleted_event_file_is_reported_at_the_end(tmp_path, caplog):
    from fitting.track.tb_logging import TBLogger

    with caplog.at_level(logging.WARNING), TBLogger(tmp_path) as tb:
        tb.scalars(0, {"loss/train": 1.0})
        tb.flush()
        tb.event_file.unlink()
        time.sleep(0.01)
        tb.scalars(1, {"loss/train": 0.5})
    assert f"the event file {tb.event_file} was deleted during the run: up to 2 records" \
        in caplog.text
