"""The drawing process: same PNGs as drawing in the run's process, and a run that survives it
failing (figures then drawn in-process)."""

import logging
import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest

from fitting.track.figure_process import FigureDrawer, draw_here
from fitting.track.figures import FigureSpec, draw


def _spec(title="step 3: y = a + b P3(c + d x)"):
    x = np.linspace(-np.pi, np.pi, 200)
    return FigureSpec(
        "line_fit",
        {"x": x, "target": np.sin(x), "pred": 0.9 * np.sin(x), "title": title,
         "target_label": "target sin(x)"},
    )


@pytest.fixture
def background():
    drawer = FigureDrawer(background=True)
    assert drawer.background
    yield drawer
    drawer.close()


def test_background_png_equals_in_process_png(background, tmp_path):
    ids = [background.submit(_spec(f"figure {i}"), tmp_path / f"bg{i}.png") for i in range(3)]
    results = [background.result(i) for i in ids]
    for i, drawn in enumerate(results):
        here = draw_here(_spec(f"figure {i}"), tmp_path / f"here{i}.png")
        assert drawn.path == tmp_path / f"bg{i}.png"
        assert (drawn.width, drawn.height) == (here.width, here.height) == (640, 400)
        assert drawn.path.read_bytes() == here.path.read_bytes()
    assert background.background  # still running: nothing fell back


def test_in_process_drawer_draws_at_submit(tmp_path):
    drawer = FigureDrawer(background=False)
    request = drawer.submit(_spec(), tmp_path / "f.png")
    assert drawer.ready(request)
    assert drawer.result(request).path.read_bytes().startswith(b"\x89PNG")


def test_helper_killed_mid_run_falls_back_to_drawing_here(background, tmp_path, caplog):
    first = background.submit(_spec(), tmp_path / "a.png")
    assert background.result(first).path.exists()
    background._proc.kill()
    background._proc.wait()
    with caplog.at_level(logging.WARNING, logger="fitting.track.figure_process"):
        pending = background.submit(_spec(), tmp_path / "b.png")  # may or may not reach it
        drawn = background.result(pending)
        later = background.result(background.submit(_spec(), tmp_path / "c.png"))
    assert drawn.path.read_bytes() == later.path.read_bytes()
    assert not background.background
    assert "drawn in this process" in caplog.text


def test_a_drawing_error_is_raised_in_the_run_with_its_message(background, tmp_path, caplog):
    bad = FigureSpec("line_fit", {"x": [0, 1], "target": [0, 1]})  # missing arguments
    request = background.submit(bad, tmp_path / "bad.png")
    with caplog.at_level(logging.WARNING), pytest.raises(TypeError, match="pred"):
        background.result(request)
    assert "the drawing process failed on a figure: TypeError" in caplog.text
    good = background.submit(_spec(), tmp_path / "good.png")  # the helper keeps serving
    assert background.result(good).path.exists() and background.background


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown figure kind 'pie'; one of"):
        draw(FigureSpec("pie", {}))


def test_helper_never_imports_torch(tmp_path):
    """The helper must not pay torch's import: it serves one request and reports sys.modules."""
    code = (
        "import io, pickle, sys\n"
        "from fitting.track.figure_process import serve\n"
        "from fitting.track.figures import FigureSpec\n"
        f"spec = pickle.loads({pickle.dumps(tuple(_spec()))!r})\n"
        f"requests = io.BytesIO(pickle.dumps((0, spec, {str(tmp_path / 'x.png')!r})))\n"
        "serve(requests, io.BytesIO())\n"
        "print('torch' in sys.modules, 'matplotlib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    assert (tmp_path / "x.png").exists()


def test_a_stuck_helper_is_replaced_by_drawing_here(background, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("fitting.track.figure_process.ANSWER_TIMEOUT", 0.5)
    os.kill(background._proc.pid, signal.SIGSTOP)  # alive, but never answers
    try:
        with caplog.at_level(logging.WARNING, logger="fitting.track.figure_process"):
            drawn = background.result(background.submit(_spec(), tmp_path / "s.png"))
    finally:
        if background._proc is not None:
            os.kill(background._proc.pid, signal.SIGCONT)
    assert drawn.path.read_bytes().startswith(b"\x89PNG")
    assert not background.background
    assert "no answer from the drawing process in 0.5 s" in caplog.text


def test_relative_paths_are_the_run_s_not_the_helper_s(background, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    drawn = background.result(background.submit(_spec(), "relative.png"))
    assert drawn.path == tmp_path / "relative.png" and drawn.path.exists()
