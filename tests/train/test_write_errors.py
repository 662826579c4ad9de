"""The pieces that turn a failed write into one line, in-process: save_atomic keeps the last
checkpoint and names its file, the event writer's thread stays quiet and names its file, a failed
train.log write raises, and write_failure tells a failed write from a bug."""

from __future__ import annotations

import errno
import logging
import os
import threading

import pytest
import torch

from fitting.track.thread_errors import event_file, settle, writer_threads
from fitting.train.checkpoint import FORMAT, save_atomic
from fitting.train.checkpoint_errors import KEYS
from fitting.train.signals import WRITE_FAILED_EXIT
from fitting.train.write_errors import WriteFailed, raise_log_write_errors, write_failure

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_checkpoint_write_keeps_the_last_one(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_atomic({"step": 1}, path)
    real_open = open

    class HalfWritten:
        """A file that takes half of what is written, then finds the disk full."""

        def __init__(self, name, mode):
            self.f = real_open(name, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("fitting.train.checkpoint.open", HalfWritten, raising=False)
    with pytest.raises(OSError, match="No space left on device") as info:
        save_atomic({"step": 2}, path)
    monkeypatch.undo()
    assert info.value.filename == str(tmp_path / "checkpoint.pt.tmp")
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_a_writer_thread_failure_is_not_printed_but_named(tmp_path, monkeypatch):
    (tmp_path / f"events.out.tfevents.1.host.{os.getpid()}.0").write_bytes(b"")
    (tmp_path / f"events.out.tfevents.2.host.{os.getpid()}.0").write_bytes(b"")
    (tmp_path / "events.out.tfevents.3.host.1.0").write_bytes(b"")  # another process's
    errors = [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), ValueError("not a write")]

    def fail(err: Exception) -> None:
        raise err

    printed: list[threading.ExceptHookArgs] = []  # what the hook in place before was given
    monkeypatch.setattr(threading, "excepthook", printed.append)
    with writer_threads(tmp_path):
        threads = [threading.Thread(target=fail, args=(err,)) for err in errors]
        for thread in threads:
            thread.start()
    settle()
    assert not any(thread.is_alive() for thread in threads)
    newest = tmp_path / f"events.out.tfevents.2.host.{os.getpid()}.0"
    assert event_file(tmp_path) == newest
    assert errors[0].filename == str(newest)
    # Not a failed write: handed on to be printed as before.
    assert [args.exc_value for args in printed] == [errors[1]]


def test_a_failed_log_file_write_raises_naming_the_file(tmp_path):
    class FullStream:
        def write(self, text):
            return len(text)

        def flush(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    handler = logging.FileHandler(tmp_path / "train.log", delay=True)
    handler.stream = FullStream()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        raise_log_write_errors()
        with pytest.raises(OSError, match="No space left on device") as info:
            logging.getLogger("x").warning("a line")
    finally:
        root.removeHandler(handler)
        handler.stream = None
    assert info.value.filename == str(tmp_path / "train.log")


def test_write_failure_tells_a_failed_write_from_a_bug(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    inside = OSError(errno.EACCES, "Permission denied", str(run_dir / "checkpoint.pt.tmp"))
    failed = write_failure(inside, run_dir)
    assert isinstance(failed, WriteFailed) and failed.exit_code == WRITE_FAILED_EXIT == 74
    assert str(failed) == (
        f"could not write {run_dir}/checkpoint.pt.tmp: Permission denied; no checkpoint was "
        f"saved yet: once {run_dir} is writable again, run the same command again"
    )
    # A full disk, whatever the file; none named: the run dir.
    elsewhere = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/elsewhere/x")
    assert str(write_failure(elsewhere, run_dir)).startswith(
        "could not write /elsewhere/x: No space left on device; no checkpoint was saved yet: "
        "once there is free space"
    )
    assert str(write_failure(ENOSPC, run_dir)).startswith(
        f"could not write {run_dir}: No space left on device; "
    )
    # Not failed writes: a missing file elsewhere, any other exception.
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/x")
    assert write_failure(missing, run_dir) is None
    assert write_failure(KeyError("model"), run_dir) is None


def test_write_failure_names_the_first_failure(tmp_path):
    """A writer that failed fails again on close: the first failed write is the one named."""
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "a"))
        finally:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "b"))
    except OSError as err:
        assert str(write_failure(err, tmp_path)).startswith(f"could not write {tmp_path}/a: ")


def test_write_failure_names_the_last_good_checkpoint(tmp_path):
    payload = {key: {} for key in KEYS} | {"format": FORMAT, "status": "running", "step": 7}
    save_atomic(payload, tmp_path / "checkpoint.pt")
    assert str(write_failure(ENOSPC, tmp_path)) == (
        f"could not write {tmp_path}: No space left on device; the last good checkpoint "
        f"{tmp_path}/checkpoint.pt (after step 7) is intact; once there is free space, continue "
        f"with: python train.py resume={tmp_path}"
    )
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    assert str(write_failure(ENOSPC, tmp_path)).endswith(
        f"{tmp_path}/checkpoint.pt cannot be read back: once there is free space, start afresh"
    )
    gone = tmp_path / "gone"
    assert str(write_failure(ENOSPC, gone)) == (
        f"could not write {gone}: No space left on device (the run dir {gone} is gone); no "
        "checkpoint is left to resume from: run the same command again to start afresh"
    )
