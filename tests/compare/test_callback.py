"""The end of every sweep (fitting.compare.callback): one table, each op's verdict over seeds,
the jobs that did not complete, compare.md and the difference runs, the HParams columns (what
varies and the task's op slots, each with its domain, the ones that differ first), and one
TensorBoard line; its start: how many jobs."""

from __future__ import annotations

import glob
import os
import time

import pytest
from google.protobuf.json_format import MessageToDict
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata

from fitting.compare import callback
from fitting.compare.runs import pair, read_runs, terminal_table
from fitting.tasks import TASKS
from tests.compare.sweeps import LOSSES, write_run
from tests.helpers.tensorboard_server import (
    WAIT_S,
    hparams_table,
    post_json,
    tensorboard,
    wait_for_runs,
)


def end_of_sweep(sweep_dir, capsys) -> list[str]:
    """The lines the callback prints at the end of a sweep in `sweep_dir`."""
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    callback.SweepSummary().on_multirun_end(config=config, config_name="config")
    return capsys.readouterr().out.splitlines()


def test_one_table_the_verdicts_the_jobs_that_did_not_complete_and_one_tensorboard_line(
        tmp_path, capsys):
    write_run(tmp_path / "0_a=custom", losses=LOSSES * 1.001)
    write_run(tmp_path / "1_a=builtin", activation="builtin")
    write_run(tmp_path / "2_a=custom,seed=1", seed=1, status="failed")
    write_run(tmp_path / "3_a=builtin,seed=1", seed=1, activation="builtin", status=None)
    with pytest.raises(SystemExit) as exit_:  # a job did not complete: the sweep exits 1
        end_of_sweep(tmp_path, capsys)
    assert exit_.value.code == 1
    lines = capsys.readouterr().out.splitlines()
    runs = read_runs(tmp_path)
    pair(runs)
    table = terminal_table(runs).splitlines()
    assert lines[:len(table)] == table  # the numbers compare.md holds
    rest = " ".join(line.strip() for line in lines[len(table):])
    assert rest.startswith("activation=custom [#0 #2] vs builtin [#1 #3]: no spread to judge")
    assert rest.endswith(f"compare.md, compare.png: {tmp_path} "
                         f"did not complete: #2 failed did not complete: #3 running or killed "
                         f"tensorboard --logdir {tmp_path}")
    assert len(glob.glob(str(tmp_path / "differences" / "*" / "events.out.tfevents.*"))) == 3  # 2 pairs, compare.png
    md = (tmp_path / "compare.md").read_text()  # the full names, the verdict, each difference
    assert "| `2_a=custom,seed=1` | activation=custom |" in md
    assert "- activation=custom [#0 #2] vs builtin [#1 #3]: no spread to judge" in md
    assert "- 0_a=custom − 1_a=builtin: max |Δ|" in md


def experiment_of(run_dir) -> list[tuple[str, bool, list]]:
    """The HParams columns of the experiment in `run_dir`: (name, differs, domain)."""
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.EXPERIMENT_TAG]
    experiment = metadata.parse_experiment_plugin_data(content)
    assert [m.name.tag for m in experiment.metric_infos] == list(callback.METRICS)
    assert [m.display_name for m in experiment.metric_infos] == [
        "loss", "step ms", "saved B"]
    return [(h.name, h.differs, [MessageToDict(v) for v in h.domain_discrete.values])
            for h in experiment.hparam_infos]


def test_hparams_columns_are_what_varies_each_with_its_domain(
        tmp_path, capsys):
    """Parallel coordinates draws only columns with a domain; a 1366 px window shows about 5
    columns: none for what is the same in every job, nor for another task's op slots."""
    for seed in (0, 1):
        write_run(tmp_path / f"{2 * seed}_a=custom,seed={seed}", seed=seed)
        write_run(tmp_path / f"{2 * seed + 1}_a=builtin,seed={seed}", seed=seed,
                  activation="builtin")
    end_of_sweep(tmp_path, capsys)
    assert experiment_of(tmp_path / "0_a=custom,seed=0") == [
        ("ops.activation", True, ["builtin", "custom"]), ("seed", True, ["0", "1"])]


def test_the_optimizer_is_a_column_where_a_sweep_varies_it(tmp_path, capsys):
    for k, (optimizer, lr) in enumerate([("adam", 1e-3), ("lbfgs", 1.0)]):
        write_run(tmp_path / f"{k}_optimizer={optimizer}", task="poly3", lr=lr,
                  optimizer=optimizer)
    end_of_sweep(tmp_path, capsys)
    assert experiment_of(tmp_path / "0_optimizer=adam") == [
        ("lr", True, ["0.001", "1"]), ("optimizer", True, ["adam", "lbfgs"])]


def test_a_sweep_of_one_job_shows_its_op_slots(tmp_path, capsys):
    write_run(tmp_path / "0_task=cnn", task="cnn")
    end_of_sweep(tmp_path, capsys)
    assert experiment_of(tmp_path / "0_task=cnn") == [
        (f"ops.{slot}", False, ["custom"]) for slot in sorted(TASKS["cnn"].slots)]


@pytest.mark.slow
def test_tensorboard_serves_each_column_with_its_domain_and_short_trial_ids(tmp_path, capsys):
    """What the HParams dashboard reads from `tensorboard --logdir SWEEP`: no column without
    a domain (the browser's `cannot process domain type`), a row per job, named by its number."""
    sweep = tmp_path / "2026-11-27" / "21-05-33-000001"
    write_run(sweep / "0_ops.activation=custom")
    write_run(sweep / "1_ops.activation=builtin", activation="builtin")
    end_of_sweep(sweep, capsys)
    runs = {str(p.relative_to(tmp_path)): {"loss/train"} for p in sweep.glob("[01]_*")}
    with tensorboard(tmp_path) as base:
        wait_for_runs(base, runs, time.monotonic() + WAIT_S)
        experiment = post_json(base + "data/plugin/hparams/experiment", {"experimentName": ""})
        columns, rows = hparams_table(base)
    assert all(h["domainDiscrete"] for h in experiment["hparamInfos"])
    assert columns == ["ops.activation"]
    assert {trial: {c: row[c] for c in columns} for trial, row in rows.items()} == {
        "21-05-33 #0": {"ops.activation": "custom"}, "21-05-33 #1": {"ops.activation": "builtin"}}


def test_the_metric_columns_are_the_ones_track_logs():
    from fitting.track.tensorboard import METRICS

    assert callback.METRICS == METRICS


def test_a_sweep_without_any_run_dir_still_ends_with_its_line(tmp_path, capsys):
    assert end_of_sweep(tmp_path, capsys) == [f"tensorboard --logdir {tmp_path}"]


def test_a_sweep_tells_train_py_where_it_is_and_its_jobs_how_many_there_are(
        tmp_path, monkeypatch):
    for name in ("FITTING_SWEEP_DIR", "FITTING_SWEEP_JOBS"):
        monkeypatch.setenv(name, "")  # restored after the test
    config = OmegaConf.create({"hydra": {
        "sweep": {"dir": str(tmp_path)}, "sweeper": {"params": {"impl": "custom,builtin"}},
        "overrides": {"task": ["task=mlp", "seed=0,1,2", "ops.activation=custom,my_ops:swish"]}}})
    callback.SweepSummary().on_multirun_start(config=config, config_name="config")
    assert os.environ["FITTING_SWEEP_DIR"] == str(tmp_path)  # train.py's signal line names it
    assert os.environ["FITTING_SWEEP_JOBS"].split()[0] == "12"  # job k of 12
