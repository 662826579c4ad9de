"""The end of every sweep (fitting.compare.callback): one table, each op's verdict over seeds,
the jobs that did not complete, compare.md and the difference runs, the HParams columns (every
slot, the ones that differ first), and one TensorBoard line."""

from __future__ import annotations

import glob
import os
import time

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata

from fitting.compare import callback
from fitting.compare.runs import pair, read_runs, terminal_table
from tests.compare.sweeps import LOSSES, write_run
from tests.helpers.tensorboard_server import WAIT_S, hparams_table, tensorboard, wait_for_runs


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
    assert len(glob.glob(str(tmp_path / "differences" / "*" / "events.out.tfevents.*"))) == 2
    md = (tmp_path / "compare.md").read_text()  # the full names, the verdict, each difference
    assert "| `2_a=custom,seed=1` | activation=custom |" in md
    assert "- activation=custom [#0 #2] vs builtin [#1 #3]: no spread to judge" in md
    assert "- 0_a=custom − 1_a=builtin: max |Δ|" in md


def experiment_of(run_dir) -> list[tuple[str, bool]]:
    """The HParams columns of the experiment in `run_dir`: (name, differs)."""
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.EXPERIMENT_TAG]
    experiment = metadata.parse_experiment_plugin_data(content)
    assert [m.name.tag for m in experiment.metric_infos] == list(callback.METRICS)
    return [(h.name, h.differs) for h in experiment.hparam_infos]


def test_hparams_list_every_op_slot_the_differing_ones_first(tmp_path, capsys):
    """Of a logdir of sweeps TensorBoard shows one experiment: each lists every task's slots."""
    write_run(tmp_path / "mlp" / "0_a=custom")
    write_run(tmp_path / "mlp" / "1_a=builtin", activation="builtin")
    write_run(tmp_path / "poly3" / "0_p=custom", task="poly3")
    write_run(tmp_path / "poly3" / "1_p=builtin", task="poly3", legendre_p3="builtin")
    end_of_sweep(tmp_path / "mlp", capsys)
    end_of_sweep(tmp_path / "poly3", capsys)
    assert glob.glob(str(tmp_path / "*" / "events.out.tfevents.*")) == []  # no empty run "."
    others = [("ops.conv_bn", False), ("ops.legendre_p3", False), ("ops.linear", False)]
    assert experiment_of(tmp_path / "mlp" / "0_a=custom") == [
        ("ops.activation", True), *others, ("run", False)]
    assert experiment_of(tmp_path / "poly3" / "0_p=custom") == [
        ("ops.legendre_p3", True), ("ops.activation", False), ("ops.conv_bn", False),
        ("ops.linear", False), ("run", False)]


@pytest.mark.slow
def test_hparams_of_a_logdir_of_sweeps_name_each_trial_and_keep_every_op_column(tmp_path, capsys):
    """`tensorboard --logdir outputs/multirun` over an mlp sweep and a poly3 sweep."""
    mlp, poly3 = tmp_path / "2026-11-27" / "21-05-33-000001", tmp_path / "2026-11-28" / "09-10-11-2"
    write_run(mlp / "0_ops.activation=custom")
    write_run(mlp / "1_ops.activation=builtin", activation="builtin")
    write_run(poly3 / "0_ops.legendre_p3=custom", task="poly3")
    write_run(poly3 / "1_ops.legendre_p3=builtin", task="poly3", legendre_p3="builtin")
    for sweep in (mlp, poly3):
        end_of_sweep(sweep, capsys)
    runs = {str(p.relative_to(tmp_path)): {"loss/train"} for p in tmp_path.glob("*/*/[01]_*")}
    with tensorboard(tmp_path) as base:
        wait_for_runs(base, runs, time.monotonic() + WAIT_S)
        columns, rows = hparams_table(base)
    assert {"ops.activation", "ops.conv_bn", "ops.legendre_p3", "ops.linear"} < set(columns)
    run = {"run": "lr=0.001 seed=0"}
    assert rows == {
        "21-05-33 #0 ops.activation=custom": {**run, "ops.linear": "custom",
                                              "ops.activation": "custom"},
        "21-05-33 #1 ops.activation=builtin": {**run, "ops.linear": "custom",
                                               "ops.activation": "builtin"},
        "09-10-11 #0 ops.legendre_p3=custom": {**run, "ops.legendre_p3": "custom"},
        "09-10-11 #1 ops.legendre_p3=builtin": {**run, "ops.legendre_p3": "builtin"}}


def test_the_metric_columns_are_the_ones_track_logs():
    from fitting.track.tensorboard import METRICS

    assert callback.METRICS == METRICS


def test_a_sweep_without_any_run_dir_still_ends_with_its_line(tmp_path, capsys):
    assert end_of_sweep(tmp_path, capsys) == [f"tensorboard --logdir {tmp_path}"]


def test_a_sweep_tells_train_py_where_it_is(tmp_path, monkeypatch):
    monkeypatch.delenv("FITTING_SWEEP_DIR", raising=False)
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    callback.SweepSummary().on_multirun_start(config=config, config_name="config")
    assert os.environ["FITTING_SWEEP_DIR"] == str(tmp_path)  # train.py's signal line names it
