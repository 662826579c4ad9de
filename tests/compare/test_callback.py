"""The end of every sweep (fitting.compare.callback): one table, the jobs that did not complete,
the difference runs, the HParams columns that differ, and one TensorBoard line."""

from __future__ import annotations

import glob
import os

from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata

from fitting.compare import callback
from fitting.compare.runs import pair, read_runs, runs_table
from tests.compare.sweeps import LOSSES, write_run


def end_of_sweep(sweep_dir, capsys) -> list[str]:
    """The lines the callback prints at the end of a sweep in `sweep_dir`."""
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    callback.SweepSummary().on_multirun_end(config=config, config_name="config")
    return capsys.readouterr().out.splitlines()


def test_one_table_the_jobs_that_did_not_complete_and_one_tensorboard_line(tmp_path, capsys):
    write_run(tmp_path / "0_a=custom", losses=LOSSES * 1.001)
    write_run(tmp_path / "1_a=builtin", activation="builtin")
    write_run(tmp_path / "2_a=custom,seed=1", seed=1, status="failed")
    write_run(tmp_path / "3_a=builtin,seed=1", seed=1, activation="builtin", status=None)
    lines = end_of_sweep(tmp_path, capsys)
    runs = read_runs(tmp_path)
    pair(runs)
    assert lines[:6] == runs_table(runs).splitlines()  # the numbers compare.md holds
    assert lines[6] == "did not complete: 2_a=custom,seed=1 (failed), 3_a=builtin,seed=1 " \
                       "(running or killed)"
    assert lines[7].startswith("mine − reference (loss/train_diff): 0_a=custom − 1_a=builtin: ")
    assert lines[8:] == [f"tensorboard --logdir {tmp_path}"]
    assert len(glob.glob(str(tmp_path / "differences" / "*" / "events.out.tfevents.*"))) == 2


def test_hparams_mark_only_the_differing_op_slots_first(tmp_path, capsys):
    write_run(tmp_path / "0_a=custom")
    write_run(tmp_path / "1_a=builtin", activation="builtin")
    end_of_sweep(tmp_path, capsys)
    assert glob.glob(str(tmp_path / "events.out.tfevents.*")) == []  # no empty run "."
    acc = EventAccumulator(str(tmp_path / "0_a=custom"))
    acc.Reload()
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.EXPERIMENT_TAG]
    experiment = metadata.parse_experiment_plugin_data(content)
    assert [(h.name, h.differs) for h in experiment.hparam_infos] == [
        ("ops.activation", True), ("ops.linear", False), ("run", False)]
    assert [m.name.tag for m in experiment.metric_infos] == list(callback.METRICS)


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
