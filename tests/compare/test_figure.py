"""compare.png stays a readable size for any number of runs, says what it grouped or left out,
and each panel is readable: a y label, legends off the data, both curves visible."""

from __future__ import annotations

import struct

import pytest

from fitting.bench.compare_runs import generate_sweep
from fitting.compare.cli import figure_rows, main
from fitting.compare.pairing import group_runs, pair_runs
from fitting.compare.plot import draw_figure
from fitting.compare.runs_reader import read_runs
from tests.compare.app_runs import ops_config, write_app_job
from tests.helpers.sweep_fixtures import job_config, poly3_losses

MAX_PX = 2000


def png_size(path) -> tuple[int, int]:
    """(width, height) from the PNG header."""
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_300_seed_runs_draw_one_row_of_median_and_band(tmp_path, capsys):
    generate_sweep(tmp_path / "sweep", runs=300, steps=5, figure_bytes=100)
    assert main([str(tmp_path / "sweep"), "--out", str(tmp_path)]) == 0
    width, height = png_size(tmp_path / "compare.png")
    assert width <= MAX_PX and height <= MAX_PX
    md = (tmp_path / "compare.md").read_text()
    assert "300 seeds (0, 1, 2, 3, 4, …) grouped: each curve is their median" in md
    assert len(capsys.readouterr().out.split("| finished |")) == 301


def test_many_experiments_draw_a_few_rows_and_name_the_rest(tmp_path):
    for n in range(8):
        cfg = job_config("custom", lr=1e-6 * (n + 1))
        write_app_job(tmp_path / f"{n}_optimizer.lr={n}", cfg, [f"optimizer.lr={n}"])
    assert main([str(tmp_path)]) == 0
    width, height = png_size(tmp_path / "compare.png")
    assert width <= MAX_PX and height <= MAX_PX
    md = (tmp_path / "compare.md").read_text()
    not_drawn = md.split("Not drawn (the figure has at most 5 rows, those with pairs first): ")[1]
    assert [f"optimizer.lr={n}" in not_drawn for n in range(8)] == [False] * 5 + [True] * 3


@pytest.fixture
def figure(tmp_path):
    """Two rows: custom and builtin with identical losses; custom and a user op that differ."""
    same, other = poly3_losses(10), poly3_losses(10, scale=1.01)
    write_app_job(tmp_path / "0_impl=custom", ops_config("custom"), ["impl=custom"], same)
    write_app_job(tmp_path / "1_impl=builtin", ops_config("builtin"), ["impl=builtin"], same)
    for n, (choice, losses) in enumerate((("custom", same), ("my_ops:swish", other)), 2):
        cfg = {**ops_config(activation=choice), "steps": 30}
        write_app_job(tmp_path / f"{n}_ops.activation={choice},steps=30", cfg,
                      [f"ops.activation={choice}", "steps=30"], losses)  # fmt: skip
    groups = group_runs(read_runs(tmp_path))
    rows = figure_rows(groups, {id(g): pair_runs(g)[0] for g in groups})
    return draw_figure(rows)


def test_each_row_has_four_panels_with_a_y_label(figure):
    assert len(figure.axes) == 2 * 4
    assert all(ax.get_ylabel() for ax in figure.axes)
    width, height = figure.canvas.get_width_height()
    assert width <= MAX_PX and height <= MAX_PX


def test_legends_do_not_cover_data(figure):
    renderer = figure.canvas.get_renderer()
    axes_boxes = [ax.get_window_extent(renderer) for ax in figure.axes]
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert not any(box.overlaps(axes_box) for axes_box in axes_boxes)


def test_text_is_at_least_9_points(figure):
    texts = [t for t in figure.findobj(lambda a: hasattr(a, "get_fontsize") and
                                       hasattr(a, "get_text")) if t.get_text()]  # fmt: skip
    assert texts and min(t.get_fontsize() for t in texts) >= 9


def test_coinciding_curves_stay_visible(figure):
    """The reference thick and light, mine thin and dashed on top of it."""
    reference, mine = figure.axes[0].get_lines()[0], figure.axes[0].get_lines()[1]
    assert reference.get_label().startswith("ref: builtin")
    assert mine.get_label().startswith("mine: custom")
    assert reference.get_linewidth() >= 2.5 * mine.get_linewidth()
    assert reference.get_alpha() < 0.5 and mine.get_linestyle() == "--"


def test_a_zero_difference_says_so_and_a_nonzero_one_is_drawn(figure):
    zero_dloss, nonzero_dloss = figure.axes[2], figure.axes[6]
    assert not zero_dloss.get_lines()
    assert any("mine = reference exactly" in t.get_text() for t in zero_dloss.texts)
    assert nonzero_dloss.get_lines()
    assert "max 0.0" in nonzero_dloss.get_title()
