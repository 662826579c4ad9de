"""Figures: drawn in TBLogger's drawing process to the same PNG as drawn directly, logged to
TensorBoard with those pixels; a drawing error raised in the run with its message; a dead
drawing process replaced by drawing in the run's process, and by a fresh worker for the next
logger; a drawing process that exits with a killed run."""

import io
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fitting.track.figures import FigureSpec, draw, write_png
from fitting.track.tb_logging import TBLogger


def _spec(title="step 3: y = a + b P3(c + d x)"):
    x = np.linspace(-np.pi, np.pi, 200)
    return FigureSpec(
        "line_fit",
        {"x": x, "target": np.sin(x), "pred": 0.9 * np.sin(x), "title": title,
         "target_label": "target sin(x)"},
    )


def _images(run_dir):
    """step -> the 'fit' image events logged in `run_dir`."""
    acc = EventAccumulator(str(run_dir), size_guidance={"images": 0}).Reload()
    return {e.step: e for e in acc.Images("fit")}


def _rgba(png):
    """The RGBA pixels of PNG bytes."""
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def test_drawn_png_equals_direct_png_and_is_logged(tmp_path):
    run = tmp_path / "run"
    with TBLogger(run) as tb:
        for i in range(3):
            tb.figure("fit", _spec(f"figure {i}"), i, tmp_path / f"bg{i}.png")
    logged = _images(run)
    assert sorted(logged) == [0, 1, 2]
    for i in range(3):
        direct = write_png(_spec(f"figure {i}"), tmp_path / f"here{i}.png")
        assert (direct.height, direct.width) == (400, 640)
        assert _rgba(direct.data).shape == (400, 640, 4)
        png = (tmp_path / f"bg{i}.png").read_bytes()
        assert png == (tmp_path / f"here{i}.png").read_bytes() == direct.data
        assert png.startswith(b"\x89PNG")
        # TensorBoard has the file's PNG itself, and its size.
        assert logged[i].encoded_image_string == png
        assert (logged[i].height, logged[i].width) == (400, 640)


def test_a_drawing_error_is_raised_in_the_run_with_its_message(tmp_path):
    bad = FigureSpec("line_fit", {"x": [0, 1], "target": [0, 1]})  # missing arguments
    with TBLogger(tmp_path) as tb:
        # Raised where the run next logs figures: the next figure() if it has failed by then
        # (a warm worker fails it at once), else the flush.
        with pytest.raises(TypeError, match="pred"):
            tb.figure("fit", bad, 0, tmp_path / "bad.png")
            tb.flush()
        tb.figure("fit", _spec(), 1, tmp_path / "good.png")  # the drawer keeps serving
    assert (tmp_path / "good.png").exists()
    assert list(_images(tmp_path)) == [1]


def test_drawing_process_killed_mid_run_falls_back_to_drawing_here(tmp_path):
    with TBLogger(tmp_path / "run") as tb:
        tb.figure("fit", _spec(), 0, tmp_path / "a.png")
        tb.flush()
        for proc in tb._drawer._processes.values():
            proc.kill()
            proc.join()
        tb.figure("fit", _spec(), 1, tmp_path / "b.png")  # may or may not reach the process
        tb.figure("fit", _spec(), 2, tmp_path / "c.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "c.png").read_bytes()
    assert (tmp_path / "b.png").read_bytes() == (tmp_path / "c.png").read_bytes()
    assert sorted(_images(tmp_path / "run")) == [0, 1, 2]
    # The next logger of the process gets a fresh worker, which draws again.
    with TBLogger(tmp_path / "next") as fresh:
        assert fresh._drawer is not tb._drawer
        fresh.figure("fit", _spec(), 0, tmp_path / "d.png")
        fresh.flush()
        assert fresh._drawer.submit(abs, -1).result() == 1
    assert (tmp_path / "d.png").read_bytes() == (tmp_path / "a.png").read_bytes()


def test_drawing_process_never_imports_torch(tmp_path):
    with TBLogger(tmp_path) as tb:
        tb.figure("fit", _spec(), 0, tmp_path / "a.png")
        tb.flush()
        loaded = tb._drawer.submit(eval, "sorted(set(__import__('sys').modules) & "
                                         "{'torch', 'matplotlib'})").result()
    assert loaded == ["matplotlib"]


@pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods() or not os.path.exists("/proc"),
    reason="needs a fork server (else the worker is spawned) and /proc to read its command",
)
def test_drawing_process_is_forked_from_the_fork_server_not_from_this_process(tmp_path):
    with TBLogger(tmp_path) as tb:
        parent = tb._drawer.submit(os.getppid).result()
    assert parent != os.getpid()
    with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
        assert b"multiprocessing.forkserver" in cmdline.read()


# A run that starts its drawing process, prints that process's pid and its parent's, then waits.
WAITING_RUN = """
import os, sys, time
from fitting.track.tb_logging import TBLogger
with TBLogger(sys.argv[1]) as tb:
    print(tb._drawer.submit(os.getpid).result(), tb._drawer.submit(os.getppid).result(),
          flush=True)
    time.sleep(120)
"""


def _gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie has: only its exit status is left)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.exists("/proc"), reason="reads process states from /proc")
def test_drawing_process_exits_when_its_run_is_killed(tmp_path):
    with subprocess.Popen([sys.executable, "-c", WAITING_RUN, str(tmp_path)],
                          stdout=subprocess.PIPE, text=True) as run:
        try:
            # The worker's parent: the fork server (where the worker is spawned: the run).
            worker, worker_parent = (int(pid) for pid in run.stdout.readline().split())
        finally:
            run.kill()  # SIGKILL: no chance to stop its worker
    deadline = time.monotonic() + 60
    while not (_gone(worker) and _gone(worker_parent)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(worker)
    assert _gone(worker_parent)


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown figure kind 'pie'; one of"):
        draw(FigureSpec("pie", {}))


def test_relative_paths_are_the_run_s(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with TBLogger(tmp_path / "run") as tb:
        tb.figure("fit", _spec(), 0, "relative.png")
    assert (tmp_path / "relative.png").read_bytes().startswith(b"\x89PNG")
