"""Figures: drawn by TBLogger to the same PNG as drawn directly, logged to TensorBoard with
those bytes; a drawing error raised with its message; a PNG written whole or not at all."""

import errno
import io
import os
from pathlib import Path

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


def test_a_drawing_error_is_raised_with_its_message(tmp_path):
    bad = FigureSpec("line_fit", {"x": [0, 1], "target": [0, 1]})  # missing arguments
    with TBLogger(tmp_path) as tb:
        with pytest.raises(TypeError, match="pred"):
            tb.figure("fit", bad, 0, tmp_path / "bad.png")
        tb.figure("fit", _spec(), 1, tmp_path / "good.png")  # the next one is drawn
    assert (tmp_path / "good.png").exists()
    assert not list(tmp_path.glob("bad.png*"))
    assert list(_images(tmp_path)) == [1]


def test_a_failed_write_leaves_the_previous_png_and_no_torn_file(tmp_path, monkeypatch):
    path = tmp_path / "fit.png"
    before = write_png(_spec("before"), path).data
    real = Path.write_bytes

    def disk_full_midway(self, data):
        real(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", disk_full_midway)
    with pytest.raises(OSError, match="No space left on device") as info:
        write_png(_spec("after"), path)
    assert info.value.filename == str(path)  # the error names the PNG
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["fit.png"]


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown figure kind 'pie'; one of"):
        draw(FigureSpec("pie", {}))


def test_relative_paths_are_the_run_s(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with TBLogger(tmp_path / "run") as tb:
        tb.figure("fit", _spec(), 0, "relative.png")
    assert (tmp_path / "relative.png").read_bytes().startswith(b"\x89PNG")
