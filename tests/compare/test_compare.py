"""fitting.compare: pairing, per-run and per-pair numbers, files written, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from fitting.compare.cli import main
from fitting.compare.runs_reader import RunsError, check_event_file, read_runs
from tests.helpers.sweep_fixtures import (
    job_config,
    poly3_losses,
    run_train_sweep,
    write_job,
    write_sweep,
)

REPO = Path(__file__).resolve().parents[2]


def table(md: str, heading: str) -> list[dict[str, str]]:
    """The rows of the markdown table under `## heading`, as dicts keyed by column."""
    section = md.split(f"## {heading}\n", 1)[1].strip()
    lines = section.split("\n\n", 1)[0].splitlines()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    header, body = rows[0], rows[2:]
    return [dict(zip(header, r, strict=True)) for r in body]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m fitting.compare ARGS` in a subprocess, from the repo root."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "fitting.compare", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    write_sweep(root)
    return root


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("out")
    result = run_cli(str(sweep), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def test_report_files_and_stdout_table(report):
    out, stdout = report
    md = (out / "compare.md").read_text()
    png = (out / "compare.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert table(stdout, "Runs") == table(md, "Runs")
    assert table(stdout, "Pairs") == table(md, "Pairs")


def test_per_run_table(report):
    runs = {r["run"].strip("`"): r for r in table(report[1], "Runs")}
    assert set(runs) == {"0_impl=custom", "1_impl=builtin", "2_impl=custom,task=mlp"}
    custom = runs["0_impl=custom"]
    assert (custom["task"], custom["impl"], custom["optimizer"]) == ("poly3", "custom", "sgd")
    assert float(custom["final loss"]) == pytest.approx(poly3_losses(20, 1.001)[-1], rel=1e-5)
    # No time/train_s in these runs: 20 steps of the median logged step time, 2.4 ms.
    assert float(custom["steps/s"]) == pytest.approx(1 / 0.0024, rel=1e-3)
    assert float(custom["wall time (s)"]) == pytest.approx(20 * 0.0024, abs=1e-3)
    # No HParams session end: these runs were never finished.
    assert custom["status"] == "running or stopped"
    assert custom["saved bytes/step"] == "48,000"
    # time/step_ms: 0.8 of the 3 ms steps, but for a 60 ms warm-up step the median ignores.
    assert float(custom["median step (ms)"]) == pytest.approx(2.4)
    assert runs["2_impl=custom,task=mlp"]["task"] == "mlp"


def test_pair_ratios_match_event_data(report, sweep):
    (pair,) = table(report[1], "Pairs")
    assert pair["runs (mine / reference)"] == "`0_impl=custom` / `1_impl=builtin`"
    assert (pair["mine"], pair["reference"]) == ("custom", "builtin")
    assert pair["common steps"] == "20"
    runs = {r.name: r for r in read_runs(sweep)}
    step_ms = {n: np.median(r.scalars["time/step_ms"].values) for n, r in runs.items()}
    expected_time = step_ms["0_impl=custom"] / step_ms["1_impl=builtin"]
    assert float(pair["time ratio (mine/ref)"]) == pytest.approx(expected_time, rel=1e-3)
    assert expected_time == pytest.approx(2.4 / 1.0, rel=1e-5)
    assert float(pair["saved-bytes ratio (mine/ref)"]) == pytest.approx(48_000 / 64_000)
    # Event values are float32: recompute the gap from the events themselves.
    lc = runs["0_impl=custom"].scalars["loss/train"].values
    lb = runs["1_impl=builtin"].scalars["loss/train"].values
    expected = np.max(np.abs(lc - lb) / np.abs(lb))
    assert float(pair["max abs(Δloss) relative"]) == pytest.approx(expected, rel=1e-3)
    assert expected == pytest.approx(1e-3, rel=1e-2)


def test_unpaired_run_is_listed(report):
    assert "Without a partner: `2_impl=custom,task=mlp`" in report[1]


def test_runs_differing_in_more_than_impl_do_not_pair(tmp_path, capsys):
    losses = poly3_losses(5)
    write_job(tmp_path / "a", job_config("custom", lr=1e-5), ["impl=custom"], losses, 0.01, 10)
    write_job(tmp_path / "b", job_config("builtin", lr=2e-5), ["impl=builtin"], losses, 0.01, 10)
    assert main([str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    assert "No pairs" in stdout and "Without a partner: `a`, `b`" in stdout
    assert (tmp_path / "compare.md").is_file() and (tmp_path / "compare.png").is_file()


def test_runs_differing_in_one_op_pair_against_the_more_builtin_run(tmp_path, capsys):
    """task=cnn ops.conv_bn=custom,builtin: each run follows impl=custom but for one op; the
    run with ops.conv_bn=builtin is the reference, named by its op in the tables."""
    losses = poly3_losses(5)
    follow = {op: "${impl}" for op in ("linear", "activation", "conv_bn", "legendre_p3")}
    for name, conv_bn in (("0_ops.conv_bn=custom", "custom"), ("1_ops.conv_bn=builtin", "builtin")):
        cfg = {**job_config("custom"), "ops": {**follow, "conv_bn": conv_bn}}
        write_job(tmp_path / name, cfg, [f"ops.conv_bn={conv_bn}"], losses, 0.01, 10)
    write_job(tmp_path / "2_impl=builtin", {**job_config("builtin"), "ops": follow},
              ["impl=builtin"], losses, 0.01, 10)
    runs = {r.name: r for r in read_runs(tmp_path)}
    assert runs["0_ops.conv_bn=custom"].impl == "custom"
    assert runs["1_ops.conv_bn=builtin"].impl == "custom, ops.conv_bn=builtin"
    assert runs["2_impl=builtin"].impl == "builtin"
    assert len({r.comparison_key() for r in runs.values()}) == 1
    assert main([str(tmp_path)]) == 0
    pairs = table(capsys.readouterr().out, "Pairs")
    assert [(p["mine"], p["reference"]) for p in pairs] == [
        ("custom", "builtin"), ("custom, ops.conv_bn=builtin", "builtin")]
    (tmp_path / "2_impl=builtin").rename(tmp_path.parent / f"{tmp_path.name}_builtin")
    assert main([str(tmp_path)]) == 0
    pairs = table(capsys.readouterr().out, "Pairs")
    assert [(p["mine"], p["reference"]) for p in pairs] == [
        ("custom", "custom, ops.conv_bn=builtin")]
    assert pairs[0]["runs (mine / reference)"] == (
        "`0_ops.conv_bn=custom` / `1_ops.conv_bn=builtin`")


def test_output_paths_do_not_break_pairs(tmp_path):
    losses = poly3_losses(5)
    for name, impl in (("x", "custom"), ("y", "builtin")):
        cfg = {
            **job_config(impl),
            "log": {"every": 1, "dir": str(tmp_path / name / "tb")},
            "output_dir": str(tmp_path / name),
        }
        write_job(tmp_path / name, cfg, [f"impl={impl}"], losses, 0.01, 10)
    runs = read_runs(tmp_path)
    assert runs[0].comparison_key() == runs[1].comparison_key()


def test_names_fall_back_to_overrides(tmp_path):
    cfg = {"task": {"n_points": 3}, "optimizer": {"lr": 0.1}, "seed": 0}
    write_job(
        tmp_path, cfg, ["task=mlp", "impl=builtin", "optimizer=adam"], poly3_losses(3), 0.01, 10
    )
    (run,) = read_runs(tmp_path)
    assert (run.name, run.task, run.impl, run.optimizer) == (
        tmp_path.name,
        "mlp",
        "builtin",
        "adam",
    )


def test_timing_falls_back_to_step_ms(tmp_path, capsys):
    write_job(tmp_path / "j", job_config("custom"), [], poly3_losses(4), 0.004, 10, wall_step=False)
    assert main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    (row,) = table(capsys.readouterr().out, "Runs")
    median_ms = 3.2  # one 80 ms warm-up step, three of 0.8 * 4 ms
    assert float(row["steps/s"]) == pytest.approx(1000 / median_ms, rel=1e-3)
    assert float(row["wall time (s)"]) == pytest.approx(4 * median_ms / 1000, abs=1e-3)
    assert "Timed from `time/step_ms`: `j`" in (tmp_path / "out" / "compare.md").read_text()


def test_time_ratio_falls_back_to_training_seconds(tmp_path, capsys):
    """Runs without time/step_ms: the ratio is of training seconds per step, marked (wall)."""
    from tests.compare.app_runs import write_app_job

    write_app_job(tmp_path / "0_impl=custom", job_config("custom"), [], None, 6.0,
                  log_step_ms=False)
    write_app_job(tmp_path / "1_impl=builtin", job_config("builtin"), [], None, 2.0,
                  log_step_ms=False)
    assert main([str(tmp_path)]) == 0
    (pair,) = table(capsys.readouterr().out, "Pairs")
    assert pair["time ratio (mine/ref)"] == "3.0000 (wall)"
    assert pair["max abs(Δloss) relative"] == "0.000e+00"
    assert pair["saved-bytes ratio (mine/ref)"] == "1.0000"


def test_longest_series_wins_over_hparams_subdir(tmp_path):
    write_job(tmp_path, job_config("custom"), [], poly3_losses(6), 0.01, 10)
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(tmp_path / "1700000000.5")) as writer:
        writer.add_scalar("loss/train", 123.0, 0)
    (run,) = read_runs(tmp_path)
    assert len(run.scalars["loss/train"].steps) == 6


def expect_error(args: list[str], capsys, *fragments: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m fitting.compare: error: ")
    for fragment in fragments:
        assert fragment in err


def test_missing_dir_is_a_clear_error(tmp_path, capsys):
    expect_error([str(tmp_path / "nope")], capsys, str(tmp_path / "nope"), "does not exist")


def test_dir_without_event_files_is_a_clear_error(tmp_path, capsys):
    (tmp_path / ".hydra").mkdir()
    expect_error([str(tmp_path)], capsys, "no TensorBoard event files", str(tmp_path))


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_event_file_is_a_clear_error(tmp_path, capsys, damage):
    job = write_job(tmp_path / "j", job_config("custom"), [], poly3_losses(5), 0.01, 10)
    (event_file,) = job.glob("events.out.tfevents.*")
    data = bytearray(event_file.read_bytes())
    if damage == "truncate":
        data = data[:-7]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "garbage":
        data = bytearray(os.urandom(300))
    else:
        data = bytearray()
    event_file.write_bytes(bytes(data))
    with pytest.raises(RunsError):
        check_event_file(event_file)
    expect_error([str(tmp_path)], capsys, str(event_file), "delete it or re-run")


def test_cli_error_has_no_traceback(tmp_path):
    result = run_cli(str(tmp_path / "nonexistent"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"python -m fitting.compare: error: {tmp_path / 'nonexistent'} does not exist; "
        "pass a sweep or run dir written by train.py"
    ]


def event_values(job_dir: Path, tag: str) -> dict[int, float]:
    """step -> value of `tag` in the job dir's own event files, read without fitting's reader."""
    acc = EventAccumulator(str(job_dir), size_guidance={SCALARS: 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


@pytest.mark.slow
def test_compare_on_a_real_sweep(tmp_path):
    sweep, out = tmp_path / "sweep", tmp_path / "out"
    run_train_sweep(sweep, "task=poly3,mlp", "log.memory_every=10")  # the tensor peak is opt-in
    result = run_cli(str(sweep), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "compare.png").read_bytes().startswith(b"\x89PNG")
    assert table(result.stdout, "Pairs") == table((out / "compare.md").read_text(), "Pairs")

    runs = {r["run"].strip("`"): r for r in table(result.stdout, "Runs")}
    assert len(runs) == 4
    for name, row in runs.items():
        assert f"impl={row['impl']}" in name and f"task={row['task']}" in name
        loss = event_values(sweep / name, "loss/train")
        assert float(row["final loss"]) == pytest.approx(loss[max(loss)], rel=1e-5)

    pairs = {p["task"]: p for p in table(result.stdout, "Pairs")}
    assert set(pairs) == {"poly3", "mlp"}
    for task, pair in pairs.items():
        custom, builtin = (n.strip("`") for n in pair["runs (mine / reference)"].split(" / "))
        assert runs[custom]["impl"] == "custom" and runs[builtin]["impl"] == "builtin"
        assert runs[custom]["task"] == runs[builtin]["task"] == task
        c_dir, b_dir = sweep / custom, sweep / builtin
        step_ms = [
            np.median(list(event_values(d, "time/step_ms").values())) for d in (c_dir, b_dir)
        ]
        saved = [
            np.median(list(event_values(d, "memory/saved_bytes").values())) for d in (c_dir, b_dir)
        ]
        lc, lb = event_values(c_dir, "loss/train"), event_values(b_dir, "loss/train")
        common = sorted(set(lc) & set(lb))
        rel = max(abs(lc[s] - lb[s]) / max(abs(lb[s]), np.finfo(np.float64).tiny) for s in common)
        assert pair["common steps"] == str(len(common))
        assert float(pair["time ratio (mine/ref)"]) == pytest.approx(step_ms[0] / step_ms[1], abs=1e-4)
        assert float(pair["saved-bytes ratio (mine/ref)"]) == pytest.approx(
            saved[0] / saved[1], abs=1e-4
        )
        assert float(pair["max abs(Δloss) relative"]) == pytest.approx(rel, rel=1e-3, abs=1e-300)
        peaks = [max(event_values(d, "memory/peak_bytes").values()) for d in (c_dir, b_dir)]
        assert float(pair["peak ratio (mine/ref)"]) == pytest.approx(peaks[0] / peaks[1], abs=1e-4)
        for name, peak in zip((custom, builtin), peaks, strict=True):
            rss = event_values(sweep / name, "memory/peak_rss_bytes")
            assert float(runs[name]["peak MiB/step"]) == pytest.approx(peak / 2**20, abs=0.06)
            assert float(runs[name]["peak RSS MiB"].replace(",", "")) == pytest.approx(
                rss[max(rss)] / 2**20, abs=0.06
            )
    # Same data, same seed: the two implementations agree to float32 rounding.
    assert float(pairs["poly3"]["max abs(Δloss) relative"]) < 1e-4


def test_unwritable_out_is_a_clear_error(sweep, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    expect_error([str(sweep), "--out", str(blocker / "out")], capsys, str(blocker / "out"))


def test_group_label_leaves_out_the_sweep_preset():
    from types import SimpleNamespace

    from fitting.compare.rows import group_label

    run = SimpleNamespace(
        task="mlp", optimizer="adam", overrides=["+experiment=compare_tasks", "impl=custom", "task=mlp", "steps=50"]
    )
    assert group_label([run]) == "mlp · adam · steps=50"


def test_a_resumed_run_reads_as_one_curve_without_purged_points(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    # First writer logs steps 0..9 but the checkpoint was at step 6; the resumed writer
    # purges 6..9 and logs 6..11 again with other values.
    first = SummaryWriter(str(tmp_path), filename_suffix=".a")
    for step in range(10):
        first.add_scalar("loss/train", 100.0 + step, step)
    first.close()
    second = SummaryWriter(str(tmp_path), purge_step=6, filename_suffix=".b")
    for step in range(6, 12):
        second.add_scalar("loss/train", 200.0 + step, step)
    second.close()
    (run,) = read_runs(tmp_path)
    series = run.scalars["loss/train"]
    assert series.steps.tolist() == list(range(12))
    assert series.values.tolist() == [100.0 + s for s in range(6)] + [200.0 + s for s in range(6, 12)]
