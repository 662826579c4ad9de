"""python -m fitting.compare: which run is whose reference, the tables' numbers, the files it
writes (atomically, and only into --out when given), any file name, every run's status."""

from __future__ import annotations

import os

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util.tensor_util import make_ndarray

from fitting.compare import plot, report
from fitting.compare.runs import DIFF_TAG, pair, read_runs, terminal_table
from fitting.slots import describe
from fitting.tasks import TASKS
from tests.compare.sweeps import LOSSES, files, write_run

LEAKY = {"_target_": "torch.nn.functional.leaky_relu", "_partial_": True, "negative_slope": 0.1}


def table(text: str, after: str = "") -> list[dict[str, str]]:
    """The rows of the first markdown table after `after` in `text`, by column."""
    lines = text.split(after, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    block = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        block.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return [dict(zip(block[0], row, strict=True)) for row in block[2:]]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    # lr=1e-3: builtin (job 3) is everyone's reference.
    write_run(root / "0_a=custom", losses=LOSSES * 1.001, step_ms=3.0)
    write_run(root / "1_a=swish", activation="my_ops:swish", peak_bytes=3e5)
    write_run(root / "2_a=leaky", activation=LEAKY, status="diverged", losses=LOSSES[:4])
    write_run(root / "3_a=builtin", activation="builtin", saved_bytes=64_000, peak_bytes=2e5)
    # lr=1e-2: a torch function is the reference of a user op, though it ran second.
    write_run(root / "4_a=swish,lr", activation="my_ops:swish", lr=1e-2)
    write_run(root / "5_a=silu,lr", activation="torch.nn.functional:silu", lr=1e-2)
    # lr=0.1: neither builtin nor torch: the first in job order (6 before 10), still running.
    write_run(root / "10_a=b,lr", activation="my_ops:b", lr=0.1)
    write_run(root / "6_a=a,lr", activation="my_ops:a", lr=0.1, status=None)
    write_run(root / "7_lr", lr=1.0)  # alone
    return root


@pytest.fixture(scope="module")
def compared(sweep, tmp_path_factory):
    """`python -m fitting.compare SWEEP --out OUT`: (out dir, compare.md, stdout, the sweep's
    files before)."""
    before, out = files(sweep), tmp_path_factory.mktemp("out")
    stdout = report.report(str(sweep), str(out))
    return out, (out / "compare.md").read_text(), stdout, before


def test_each_run_against_its_reference(sweep):
    runs = read_runs(sweep)
    pair(runs)
    assert [r.name for r in runs] == ["0_a=custom", "1_a=swish", "2_a=leaky", "3_a=builtin",
                                      "4_a=swish,lr", "5_a=silu,lr", "6_a=a,lr", "7_lr",
                                      "10_a=b,lr"]
    refs = {r.name: r.reference.name if r.reference else None for r in runs}
    assert refs == {"0_a=custom": "3_a=builtin", "1_a=swish": "3_a=builtin",
                    "2_a=leaky": "3_a=builtin", "3_a=builtin": None,
                    "4_a=swish,lr": "5_a=silu,lr", "5_a=silu,lr": None,
                    "6_a=a,lr": None, "10_a=b,lr": "6_a=a,lr", "7_lr": None}


def test_impl_pairs_custom_against_builtin(tmp_path):
    """`-m impl=custom,builtin`: every slot follows impl ('${impl}' in .hydra/config.yaml)."""
    write_run(tmp_path / "0_impl=custom")
    write_run(tmp_path / "1_impl=builtin", impl="builtin")
    runs = read_runs(tmp_path)
    pair(runs)
    assert runs[0].reference is runs[1]
    # Only the task's slots (results.json's), the others' '${impl}' resolved all the same.
    assert runs[1].ops == dict.fromkeys(TASKS["mlp"].slots, "builtin")


def test_runs_table(compared):
    rows = {r["job"].strip("`"): r for r in table(compared[1], "## Runs")}
    mine, ref = rows["0_a=custom"], rows["3_a=builtin"]
    assert mine["ops"] == "activation=custom"
    assert float(mine["final loss"]) == pytest.approx(LOSSES[-1] * 1.001, rel=1e-5)
    assert float(mine["Δ loss vs ref"]) == pytest.approx(LOSSES[-1] * 0.001, rel=5e-3)
    assert (mine["step ms (median)"], mine["× ref"], mine["saved bytes"]) == ("3", "1.500", "48,000")
    assert (ref["Δ loss vs ref"], ref["× ref"], ref["saved bytes"]) == ("ref", "ref", "64,000")
    # The text fitting.slots.describe gives in the run's log, results.json and HParams.
    assert rows["2_a=leaky"]["ops"] == f"activation={describe(LEAKY)}"
    assert rows["2_a=leaky"]["status"] == "diverged"
    assert rows["6_a=a,lr"]["status"] == "running or killed"
    # No results.json: the numbers come from the event file.
    assert float(rows["6_a=a,lr"]["final loss"]) == pytest.approx(LOSSES[-1], rel=1e-5)
    assert rows["6_a=a,lr"]["step ms (median)"] == "2"
    assert (rows["7_lr"]["Δ loss vs ref"], rows["7_lr"]["status"]) == ("", "completed")


def test_pairs_table(compared):
    pairs = {r["mine"].strip("`"): r for r in table(compared[1], "## Pairs")}
    assert set(pairs) == {"0_a=custom", "1_a=swish", "2_a=leaky", "4_a=swish,lr", "10_a=b,lr"}
    custom = pairs["0_a=custom"]
    assert (custom["reference"], custom["common steps"]) == ("`3_a=builtin`", "10")
    assert float(custom["max rel. Δloss"]) == pytest.approx(1e-3, rel=1e-3)
    assert (custom["step time ×"], custom["saved bytes ×"]) == ("1.5000", "0.7500")
    assert (custom["peak ×"], custom["peak RSS ×"]) == ("n/a", "1.0000")
    assert pairs["1_a=swish"]["peak ×"] == "1.5000"
    assert pairs["2_a=leaky"]["common steps"] == "4"


def test_files_go_to_out_and_nothing_into_the_runs_dir(compared, sweep):
    out, _, stdout, before = compared
    assert files(sweep) == before
    runs = read_runs(sweep)
    pair(runs)
    assert stdout.startswith(terminal_table(runs) + "\n")
    assert stdout.endswith(f"compare.md, compare.png: {out}\n"  # as the sweep's end says
                           "did not complete: #2 diverged\ndid not complete: #6 running or killed\n"
                           f"tensorboard --logdir {sweep}\n")
    assert (out / "compare.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(os.listdir(out)) == ["compare.md", "compare.png", "differences"]
    shown_in_tensorboard = EventAccumulator(str(out / "differences" / "compare")).Reload()
    assert shown_in_tensorboard.Tags()["images"] == ["compare/runs"]  # compare.png, first


def test_difference_runs_say_identical_and_missing(tmp_path):
    write_run(tmp_path / "0_same", activation="my_ops:same")
    write_run(tmp_path / "1_ref", activation="builtin")
    write_run(tmp_path / "2_other", activation="my_ops:other", losses=LOSSES + 1.0)
    write_run(tmp_path / "3_none", activation="my_ops:none", losses=LOSSES[:0])
    report.report(str(tmp_path))
    text = (tmp_path / "compare.md").read_text()
    assert "0_same − 1_ref: identical at all 10 common steps (a flat line at 0)" in text
    assert "2_other − 1_ref: max |Δ| 1" in text
    assert "3_none − 1_ref: missing (no step logged by both)" in text
    assert sorted(os.listdir(tmp_path / "differences")) == ["0_same_minus_1_ref",
                                                            "2_other_minus_1_ref", "compare"]
    acc = EventAccumulator(str(tmp_path / "differences" / "2_other_minus_1_ref"))
    acc.Reload()
    diff = [float(make_ndarray(e.tensor_proto)) for e in acc.Tensors(DIFF_TAG)]
    assert diff == pytest.approx(np.ones(10), rel=1e-4)
    assert acc.summary_metadata[DIFF_TAG].summary_description == "max |Δ| 1"
    # Custom Scalars' mine − reference chart comes with the lines it draws, and only then.
    compare_run = EventAccumulator(str(tmp_path / "differences" / "compare")).Reload()
    assert "custom_scalars__config__" in compare_run.Tags()["tensors"]
    write_run(tmp_path / "alone" / "0_ref", activation="builtin")  # nothing to pair
    report.report(str(tmp_path / "alone"))
    compare_run = EventAccumulator(str(tmp_path / "alone" / "differences" / "compare")).Reload()
    assert "custom_scalars__config__" not in compare_run.Tags()["tensors"]


def test_a_non_utf8_dir_name(tmp_path, capsys):
    root = os.fsencode(tmp_path)
    write_run(root + b"/0_a=\xff\xfe", activation="my_ops:mine")
    write_run(root + b"/1_a=builtin", activation="builtin")
    assert report.main([os.fsdecode(root)]) == 0
    assert "\n#0     my_ops:mine " in capsys.readouterr().out
    assert "| `0_a=??` |" in (tmp_path / "compare.md").read_text()
    assert sorted(os.listdir(tmp_path / "differences")) == ["0_a=_minus_1_a=builtin", "compare"]


def test_a_failed_write_leaves_the_old_files_whole(tmp_path, monkeypatch):
    write_run(tmp_path / "0_a=custom")
    write_run(tmp_path / "1_a=builtin", activation="builtin")
    (tmp_path / "compare.md").write_text("old report")
    (tmp_path / "compare.png").write_bytes(b"old figure")

    def half_a_figure(runs):
        class Figure:
            def savefig(self, f, format):
                f.write(b"\x89PNG half")
                raise OSError(28, "No space left on device")
        return Figure()

    monkeypatch.setattr(plot, "figure", half_a_figure)
    with pytest.raises(SystemExit) as stop:
        report.main([str(tmp_path)])
    assert stop.value.code == 2
    assert (tmp_path / "compare.md").read_text() == "old report"
    assert (tmp_path / "compare.png").read_bytes() == b"old figure"
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_no_runs_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        report.main([str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert err.startswith("python -m fitting.compare: error: no run dir")


def test_figure_reference_thick_as_a_band_mine_thin_and_dashed_per_seed(tmp_path):
    for seed in range(3):
        write_run(tmp_path / f"{2 * seed}_mine", seed=seed, losses=LOSSES * (1 + 0.01 * seed))
        write_run(tmp_path / f"{2 * seed + 1}_ref", seed=seed, activation="builtin")
    runs = read_runs(tmp_path)
    pair(runs)
    fig = plot.figure(runs)
    loss, gap = fig.axes
    ref, *mine = loss.get_lines()
    assert ref.get_label() == "ref: activation=builtin" and ref.get_linewidth() == 5.0
    assert ref.get_alpha() == 0.35 and len(loss.collections) == 1  # the reference's band
    assert [line.get_linestyle() for line in mine] == ["--"] * 3  # a line per seed
    assert mine[0].get_label() == "activation=custom: same"  # within the seed spread
    assert "reference: median, min–max of 3 seeds" in loss.get_title()
    assert len(gap.get_lines()) == 1
