"""What a TensorBoard user finds in a run: the tags, the HParams columns, the Custom Scalars
layout (train and val apart), the figure, all read back with TensorBoard's own reader."""

from __future__ import annotations

import math

import pytest
import torch
from google.protobuf.json_format import MessageToDict
from matplotlib.figure import Figure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from fitting.track.tensorboard import (
    DIFF_TAG,
    LOG10_TAG,
    LOG_STEP_TAG,
    METRICS,
    TensorBoard,
    hparam_values,
    norms,
)

STEP = {"loss/train": 9.0, "time/step_ms": 0.3, "time/step_ms_median": 0.25,
        "memory/saved_bytes": 32004.0, "memory/peak_rss_bytes": 2e8, "optim/grad_norm": 1.0}


def read(run_dir) -> EventAccumulator:
    return EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0}).Reload()


def test_scalars_and_histograms_read_back(tmp_path):
    model = torch.nn.Linear(3, 2)
    model(torch.ones(4, 3)).sum().backward()
    named = list(model.named_parameters())
    with TensorBoard(tmp_path) as tb:
        for step in range(3):
            tb.scalars(step, {**STEP, "loss/train": 9.0 - step, **norms(named)})
        tb.scalars(2, {"loss/val": 4.5})
        tb.histograms(2, named)
    acc = read(tmp_path)
    tags = set(acc.Tags()["scalars"])
    assert set(STEP) | {LOG10_TAG, LOG_STEP_TAG, "loss/val", "norms/weight/weight", "norms/grad/weight",
                        "norms/weight/bias", "norms/grad/bias"} == tags
    assert not [t for t in tags if t.startswith("loss_by_task")]
    assert [(e.step, e.value) for e in acc.Scalars("loss/train")] == [(0, 9.0), (1, 8.0), (2, 7.0)]
    # The decades of the loss apart on TensorBoard's linear axis.
    assert [e.value for e in acc.Scalars(LOG10_TAG)] == pytest.approx(
        [math.log10(9.0), math.log10(8.0), math.log10(7.0)])
    assert acc.Scalars("norms/weight/weight")[0].value == pytest.approx(
        float(model.weight.detach().norm()))
    assert set(acc.Tags()["histograms"]) == {"weights/weight", "weights/weight.grad",
                                             "weights/bias", "weights/bias.grad"}
    # One run, one event file, no sub-run dirs.
    assert [p.name[:20] for p in tmp_path.iterdir()] == ["events.out.tfevents."]


def test_scalar_parameters_are_logged_as_params():
    a, b = torch.tensor(3.0, requires_grad=True), torch.tensor(4.0, requires_grad=True)
    (a * b).backward()  # grads: 4, 3
    assert norms([("a", a), ("b", b)]) == {"params/a": 3.0, "params/b": 4.0}


CONFIG = {"task": {"_target_": "fitting.tasks.MLPTask"},
          "optimizer": {"_target_": "torch.optim.Adam", "lr": 0.001}, "seed": 1}


@pytest.mark.parametrize(("run_dir", "trial"), [
    ("multirun/2026-11-27/21-05-33-123456/0_impl=custom", "21-05-33 #0"),
    ("multirun/2026-11-27/21-05-33-123456/12_ops.activation=my_ops:swish_with_a_long_name,"
     "seed=3", "21-05-33 #12"),
    ("2026-11-27/21-05-33-123456", "2026-11-27 21-05-33-123456"),
])
def test_hparams_session_is_in_the_run_itself_and_leaves_the_columns_to_the_sweep(
        tmp_path, run_dir, trial):
    ops = {"linear": "custom", "activation": "torch.nn.functional.leaky_relu(negative_slope=0.1)"}
    overrides = ["task=mlp", f"ops.activation={ops['activation']}", "seed=1", "task.width=32"]
    with TensorBoard(tmp_path / run_dir) as tb:
        tb.hparams(hparam_values({"task": "mlp", "optimizer": "adam", "ops": ops}, CONFIG,
                                 overrides))
        tb.scalars(0, STEP)
    tmp_path = tmp_path / run_dir
    content = read(tmp_path).PluginTagToContent("hparams")
    # No experiment (the columns): TensorBoard would take one run's and hide the sweep's.
    assert set(content) == {"_hparams_/session_start_info", "_hparams_/session_end_info"}
    data = plugin_data_pb2.HParamsPluginData
    start = data.FromString(content["_hparams_/session_start_info"]).session_start_info
    values = {name: v.string_value for name, v in start.hparams.items()}
    assert values == {"ops.linear": "custom", "ops.activation": ops["activation"],
                      "task": "mlp", "optimizer": "adam", "lr": "0.001", "seed": "1",
                      "task.width": "32"}  # an override beyond task, optimizer, lr, seed, ops
    assert start.group_name == trial  # HParams' Trial ID: the sweep's time and the job
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []
    assert METRICS == ("loss/train", "time/step_ms_median", "memory/saved_bytes")


def layout_charts(run_dir) -> dict[str, list[str]]:
    """The Custom Scalars charts TensorBoard uses for a run (its last layout): title -> tags."""
    event = read(run_dir).Tensors("custom_scalars__config__")[-1]
    layout = MessageToDict(layout_pb2.Layout.FromString(event.tensor_proto.string_val[0]))
    return {chart["title"]: chart["multiline"]["tag"]
            for category in layout["category"] for chart in category["chart"]}


@pytest.mark.parametrize("validates", [False, True], ids=["no validation set", "validates"])
def test_custom_scalars_chart_only_what_the_run_logs_train_and_val_apart(tmp_path, validates):
    with TensorBoard(tmp_path) as tb:
        tb.scalars(0, STEP)
        if validates:
            tb.scalars(100, {"loss/val": 2.0})
    charts = layout_charts(tmp_path)
    assert [t for t, tags in charts.items() if tags == ["^loss/train$"]]
    assert len([t for t, tags in charts.items() if tags == ["^loss/val$"]]) == validates
    assert [f"^{DIFF_TAG}$"] not in charts.values()  # fitting.compare's difference runs chart it
    assert list(charts.values())[0] == [f"^{LOG10_TAG}$"]  # the loss's decades first
    assert charts["time/step_ms_median"] == ["^time/step_ms_median$"]


def test_a_17_step_run_spans_a_third_of_a_2000_step_ones_log_step_axis(tmp_path):
    ends = {}
    for steps in (17, 2000):
        with TensorBoard(tmp_path / str(steps)) as tb:
            for step in range(steps + 1):
                tb.scalars(step, {"loss/train": 10.0 ** -(step / steps)})
        points = read(tmp_path / str(steps)).Scalars(LOG_STEP_TAG)
        assert points[0].step == 0 and points[0].value == pytest.approx(0.0)
        assert points[-1].value == pytest.approx(-1.0)
        ends[steps] = points[-1].step
    assert ends == {17: 1255, 2000: 3301}  # 1000·log10(step + 1)


def test_figure_is_saved_as_png_and_logged(tmp_path):
    fig = Figure(figsize=(3.2, 2.0), dpi=100)
    fig.subplots().plot([0, 1], [1, 0])
    png = tmp_path / "fit_step000010.png"
    with TensorBoard(tmp_path) as tb:
        tb.figure("plots/fit", fig, 10, png)
    assert png.read_bytes().startswith(b"\x89PNG")
    assert not list(tmp_path.glob("*.tmp"))
    (image,) = EventAccumulator(str(tmp_path)).Reload().Images("plots/fit")
    assert (image.step, image.height, image.width) == (10, 200, 320)


def test_a_failed_png_write_leaves_the_previous_png_and_no_tmp(tmp_path, monkeypatch):
    from fitting.track import files
    from fitting.track.tensorboard import save_png

    fig = Figure(figsize=(1, 1))
    png = tmp_path / "fit.png"
    save_png(fig, png)
    before = png.read_bytes()

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        save_png(fig, png)
    assert png.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["fit.png"]
