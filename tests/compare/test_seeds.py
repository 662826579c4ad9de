"""Trains the same? over seeds: the rule (fitting.compare.seeds.trains_same), a sweep's verdict
per op (compare.md, the terminal) and compare.png's reference band, on fixture sweeps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ttest_ind

from fitting.compare import plot, report
from fitting.compare.runs import pair, read_runs
from fitting.compare.seeds import trains_same, verdict_lines
from fitting.tasks import TASKS
from tests.compare.sweeps import LOSSES, write_run

SPREAD = np.array([1.0, 1.08, 0.95, 1.3, 1.02])  # the reference's seeds: skewed, mean ≠ median


def test_the_rule_on_final_losses():
    ref = 9.0 * SPREAD
    assert trains_same(ref, ref, identical=True)[0] == "identical"
    assert trains_same(ref * 1.0001, ref, identical=False)[0] == "same"
    verdict, text = trains_same(ref * 3, ref, identical=False)
    assert verdict == "differs"
    p = ttest_ind(np.log(ref * 3), np.log(ref), equal_var=False).pvalue
    assert text == (f"differs (p < 0.05); final loss median 27.54 (25.65–35.1, n=5) vs the "
                    f"reference's 9.18 (8.55–11.7, n=5); ratio of medians 3; Welch p={p:.2g}")
    assert trains_same([9.0, math.nan], ref, identical=False)[0] == "differs"  # diverged
    assert trains_same([9.0, math.inf], ref, identical=False)[0] == "differs"
    verdict, text = trains_same([9.0], ref, identical=False)
    assert verdict == "too few seeds" and text.startswith("no spread to judge")
    assert "9 (n=1) vs the reference's 9.18 (8.55–11.7, n=5)" in text


def test_the_t_test_is_on_the_logs_and_zero_spread_is_no_error():
    ref, mine = [1, 1.1, 0.9, 1.05, 0.95], [1.3, 1.4, 1.35, 6.0, 1.32]
    p = ttest_ind(np.log(mine), np.log(ref), equal_var=False).pvalue  # 0.12; of the losses: 0.24
    assert trains_same(mine, ref, identical=False)[1].endswith(f"Welch p={p:.2g}")
    assert trains_same([2.0, 2.0], [2.0, 2.0, 2.0], identical=False)[0] == "same"
    assert trains_same([2.0, 2.0], [3.0, 3.0, 3.0], identical=False)[0] == "differs"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """`-m ops.activation=builtin,my_ops:same,my_ops:approx,my_ops:worse,my_ops:nan
    seed=0,1,2,3,4`, and at lr=0.01 one seed of builtin and approx."""
    root, job = tmp_path_factory.mktemp("seeds"), 0
    for op, scale, status in [("builtin", 1.0, "completed"), ("my_ops:same", 1.0, "completed"),
                              ("my_ops:approx", 1.0001, "completed"),
                              ("my_ops:worse", 3.0, "completed"), ("my_ops:nan", 1.0, "diverged")]:
        for seed, spread in enumerate(SPREAD):
            losses = LOSSES * spread * scale
            if op == "my_ops:nan" and seed == 2:  # stopped at a non-finite weight: as the
                losses = losses[:5]  # reference up to there, results.json's loss finite
            write_run(root / f"{job}_seed={seed}", seed=seed, activation=op, losses=losses,
                      status="diverged" if op == "my_ops:nan" and seed == 2 else status)
            job += 1
    for op, scale in (("builtin", 1.0), ("my_ops:approx", 1.0001)):
        write_run(root / f"{job}_lr", lr=0.01, activation=op, losses=LOSSES * scale)
        job += 1
    return root


def test_a_sweep_over_seeds_says_per_op_whether_it_trains_the_same(sweep):
    stdout = report.report(str(sweep))
    said = dict(line.split("]: ", 1) for line in (sweep / "compare.md").read_text()
                .split("## Trains the same?")[1].split("\n## ")[0].splitlines()
                if line.startswith("- "))
    ref = "vs builtin [#0 #1 #2 #3 #4"
    assert said[f"- activation=my_ops:same [#5 #6 #7 #8 #9] {ref}"].startswith("identical: ")
    assert said[f"- activation=my_ops:approx [#10 #11 #12 #13 #14] {ref}"] == (
        "the same within the seed spread; final loss median 146.1 (136.1–186.2, n=5) vs the "
        "reference's 146.1 (136.1–186.2, n=5); ratio of medians 1; Welch p=1")
    assert said[f"- activation=my_ops:worse [#15 #16 #17 #18 #19] {ref}"].startswith(
        "differs (p < 0.05); final loss median 438.2 (408.2–558.5, n=5) vs ")
    assert said[f"- activation=my_ops:nan [#20 #21 #22 #23 #24] {ref}"].startswith(
        "differs: a final loss is not finite (a diverged run); ")
    assert said["- activation=my_ops:approx [#26] vs builtin [#25"].startswith(
        "no spread to judge (sweep seed=0,1,2,3,4); final loss median 143.2 (n=1) vs the reference's 143.2 (n=1)")
    terminal = " ".join(stdout.split())  # the same lines, wrapped at 100 columns
    assert all(" ".join(f"{k[2:]}]: {v}".split()) in terminal for k, v in said.items())


def test_the_figure_draws_the_references_median_and_min_max_band(sweep):
    runs = read_runs(sweep)
    pair(runs)
    ax = plot.figure(runs).axes[0]
    ref, *mine = ax.get_lines()
    series = np.vstack([r.scalars["loss/train"][1] for r in runs[:5]])  # builtin's 5 seeds
    assert ref.get_label() == "ref: activation=builtin"
    assert np.array_equal(ref.get_xdata(), np.arange(10))
    assert np.array_equal(ref.get_ydata(), np.median(series, axis=0))
    (band,) = ax.collections
    vertices = band.get_paths()[0].vertices
    for step in range(10):
        ys = vertices[vertices[:, 0] == step, 1]
        assert {ys.min(), ys.max()} == {series[:, step].min(), series[:, step].max()}
    assert len(mine) == 20  # every seed of every other op, over the band
    assert np.array_equal(mine[10].get_ydata(), runs[15].scalars["loss/train"][1])
    assert mine[10].get_label() == "activation=my_ops:worse: differs"


def test_each_seed_is_compared_with_the_references_run_of_that_seed(tmp_path):
    """Seed 1 lacks the builtin run: my_ops:a pairs there with my_ops:b, not the reference."""
    write_run(tmp_path / "0_a", seed=2, activation="my_ops:a", status=None)  # every slot's op
    write_run(tmp_path / "1_b", seed=1, activation="my_ops:b")
    write_run(tmp_path / "2_a", seed=1, activation="my_ops:a")
    write_run(tmp_path / "3_builtin", seed=0, activation="builtin")
    write_run(tmp_path / "4_a", seed=0, activation="my_ops:a")
    report.report(str(tmp_path))
    md = (tmp_path / "compare.md").read_text()
    assert "- activation=my_ops:a [#0 #2 #4] vs builtin [#3]: no spread to judge" in md
    assert "- activation=my_ops:b [#1] vs builtin [#3]: no spread to judge" in md


@pytest.mark.parametrize("worse", [False, True])
def test_slots_changed_together_get_a_verdict_line_each(tmp_path, worse):
    """impl=custom,builtin on a task of several slots: every slot that differs has its line."""
    task = max(TASKS, key=lambda name: len(TASKS[name].slots))
    slots = TASKS[task].slots
    for seed in range(3):
        write_run(tmp_path / f"{2 * seed}_custom", seed=seed, task=task, impl="custom",
                  losses=LOSSES * (2.0 if worse else 1.0 + 1e-3 * (seed - 1)))
        write_run(tmp_path / f"{2 * seed + 1}_builtin", seed=seed, task=task, impl="builtin",
                  losses=LOSSES * (1.0 - 1e-3 * (seed - 1)))
    runs = read_runs(str(tmp_path))
    pair(runs)
    lines = verdict_lines(runs)
    assert [line.split("=", 1)[0] for line in lines] == list(slots)
    for slot, line in zip(slots, lines, strict=True):
        others = ", ".join(s for s in slots if s != slot)
        assert line.startswith(f"{slot}=custom [#0 #2 #4] vs builtin [#1 #3 #5], changed with "
                               f"{others}: " + ("differs" if worse else "the same within"))
        assert line.endswith(f"; which slot: sweep ops.{slot}=custom,builtin alone") == worse
