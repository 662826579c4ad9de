"""TensorBoard side of a sweep: the custom-scalars layout and the HParams table, in the event
files and as a real TensorBoard server serves them for a real sweep."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from fitting.track.tb_logging import METRICS, TBLogger, custom_scalars_layout
from tests.helpers.sweep_fixtures import REPO, tensorboard_run_names
from tests.helpers.tensorboard_server import WAIT_S, get_json, tensorboard

LAYOUT_TAG = "custom_scalars__config__"
POLY3_STEP = {"params/a": 0.0, "params/b": -1.0, "params/c": 0.0, "params/d": 0.3,
              "loss/train": 9.0, "optim/grad_norm": 1.0, "memory/saved_bytes": 32004.0,
              "time/step_ms": 0.3}
HPARAMS = {"ops.legendre_p3": "custom", "run": "poly3 sgd lr=5e-06 steps=2 seed=0 float32 cpu"}
# Every chart of every task: (category, chart title) -> the tags it draws.
FIXED_CHARTS = {
    ("loss", "loss/train, loss/val"): ["^loss/train$", "^loss/val$"],
    ("cost per step", "memory/saved_bytes"): ["^memory/saved_bytes$"],
    ("cost per step", "memory/peak_bytes"): ["^memory/peak_bytes$"],
    ("cost per step", "memory/peak_rss_bytes"): ["^memory/peak_rss_bytes$"],
    ("cost per step", "time/step_ms"): ["^time/step_ms$"],
    ("optimizer", "optim/grad_norm"): ["^optim/grad_norm$"],
}
# A poly3 run's loss charts (the task's own tags, and a pair's mine − reference).
POLY3_LOSS = {
    ("loss (poly3)", "poly3: loss/train and loss/val, every run"):
        ["^loss_by_task/poly3/train$", "^loss_by_task/poly3/val$"],
    ("loss (poly3)", "poly3: loss/train, mine − reference"): ["^loss_by_task/poly3/train_diff$"],
}


def charts(layout: dict) -> dict[tuple[str, str], list[str]]:
    """(category, chart title) -> tag regexes, from a layout as the server's JSON gives it."""
    return {
        (category["title"], chart["title"]): chart["multiline"]["tag"]
        for category in layout["category"]
        for chart in category["chart"]
    }


def layout_in(run_dir: Path) -> dict:
    """The custom-scalars layout written to the run in `run_dir`, as JSON-like dicts."""
    from google.protobuf.json_format import MessageToDict

    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0}).Reload()
    events = acc.Tensors(LAYOUT_TAG)
    assert len(events) == 1
    layout = layout_pb2.Layout.FromString(events[0].tensor_proto.string_val[0])
    return MessageToDict(layout)


def test_layout_has_one_chart_per_metric_and_parameter():
    mlp_step = {"loss/train": 1.0, "norms/weight/0.weight": 2.0, "norms/weight/0.bias": 3.0,
                "norms/grad/0.weight": 4.0, "optim/grad_norm": 1.0}
    layout = custom_scalars_layout(mlp_step)
    assert list(layout) == ["loss", "parameters", "cost per step", "optimizer"]
    assert layout["parameters"] == {
        "norms/weight/0.weight": ["Multiline", [r"^norms/weight/0\.weight$"]],
        "norms/weight/0.bias": ["Multiline", [r"^norms/weight/0\.bias$"]],
    }
    assert layout["loss"] == {"loss/train, loss/val": ["Multiline", ["^loss/train$", "^loss/val$"]]}
    # A run of a task: its loss charts are that task's, beside mine − reference of a pair.
    layout = custom_scalars_layout(mlp_step, "mlp")
    assert list(layout) == ["loss (mlp)", "parameters", "cost per step", "optimizer"]
    assert layout["loss (mlp)"] == {
        "mlp: loss/train and loss/val, every run":
            ["Multiline", ["^loss_by_task/mlp/train$", "^loss_by_task/mlp/val$"]],
        "mlp: loss/train, mine − reference": ["Multiline", ["^loss_by_task/mlp/train_diff$"]],
    }
    # Exact tags: params/a's chart must not also draw a params/ab.
    (regex,) = custom_scalars_layout(POLY3_STEP)["parameters"]["params/a"][1]
    assert re.search(regex, "params/a") and not re.search(regex, "params/ab")
    # No parameter tags: no empty category.
    assert "parameters" not in custom_scalars_layout({"loss/train": 1.0})


def test_run_writes_its_layout_once_on_its_first_loss_record(tmp_path):
    with TBLogger(tmp_path) as tb:
        tb.scalars(0, {"loss/val": 1.0})  # a validation-only record comes first
        tb.scalars(0, POLY3_STEP)
        tb.scalars(1, POLY3_STEP)
    got = charts(layout_in(tmp_path))
    params = {("parameters", f"params/{p}"): [f"^params/{p}$"] for p in "abcd"}
    assert got == {**FIXED_CHARTS, **params}


def test_a_resumed_run_reads_in_order_after_a_file_of_the_same_second(tmp_path):
    """TensorBoard reads event files in name order: creation second, host, pid, counter. An
    earlier file of the same second whose pid sorts after this process's must still be read
    first."""
    with TBLogger(tmp_path) as first:
        first.scalars(0, {"loss/train": 1.0})
        first.scalars(1, {"loss/train": 0.5})
    (earlier,) = tmp_path.glob("events.out.tfevents.*")
    head, _pid, counter = earlier.name.rsplit(".", 2)
    earlier = earlier.rename(tmp_path / f"{head}.99999999.{counter}")  # another process's
    with TBLogger(tmp_path, purge_step=1) as resumed:
        resumed.scalars(1, {"loss/train": 0.25})
    names = sorted(p.name for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(names) == 2 and names[0] == earlier.name
    acc = EventAccumulator(str(tmp_path)).Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss/train")] == [(0, 1.0), (1, 0.25)]


def test_hparams_table_columns_and_sweep_axes(tmp_path):
    with TBLogger(tmp_path) as tb:
        tb.scalars(0, POLY3_STEP)
        tb.hparams(HPARAMS)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    content = acc.PluginTagToContent("hparams")
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/experiment"]
    ).experiment
    # The per-step tags every task logs, with short names, in one order in every run.
    assert [m.name.tag for m in experiment.metric_infos] == list(METRICS)
    assert [m.display_name for m in experiment.metric_infos] == list(METRICS.values())
    differs = {h.name for h in experiment.hparam_infos if h.differs}
    assert differs == {"ops.legendre_p3"}
    assert {h.name for h in experiment.hparam_infos} == set(HPARAMS)
    assert "_hparams_/session_start_info" in content and "_hparams_/session_end_info" in content
    # No one-point final/* charts, no sub-run dir.
    assert not [t for t in acc.Tags()["scalars"] if t.startswith("final/")]
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


def poll(fetch, done, deadline: float):
    """fetch() until done(answer) or the deadline (then fail with the last answer)."""
    answer = None
    while time.monotonic() < deadline:
        answer = fetch()
        if done(answer):
            return answer
        time.sleep(0.5)
    raise AssertionError(f"not served within {WAIT_S} s; last answer: {answer}")


@pytest.mark.slow
def test_tensorboard_serves_layout_and_hparams_of_a_compare_impls_sweep(tmp_path):
    cmd = [sys.executable, "train.py", "-m", "+experiment=compare_impls", "steps=30",
           f"hydra.sweep.dir={tmp_path}"]
    result = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    names = tensorboard_run_names(tmp_path)
    assert names == {"custom": "0_impl=custom,steps=30", "builtin": "1_impl=builtin,steps=30"}

    with tensorboard(tmp_path) as base:
        deadline = time.monotonic() + WAIT_S
        layout = poll(lambda: get_json(base + "data/plugin/custom_scalars/layout"),
                      lambda answer: bool(answer), deadline)
        params = {("parameters", f"params/{p}"): [f"^params/{p}$"] for p in "abcd"}
        fixed = {k: v for k, v in FIXED_CHARTS.items() if k[0] != "loss"}
        assert charts(layout) == {**fixed, **params, **POLY3_LOSS}
        # Each multi-line chart draws its tag for every run: custom and builtin overlaid.
        scalars = get_json(base + "data/plugin/scalars/tags")
        assert all("loss/train" in scalars[run] for run in names.values())

        experiment = post_json(base + "data/plugin/hparams/experiment", {"experimentName": ""})
        columns = [m["name"]["tag"] for m in experiment["metricInfos"]]
        assert columns == list(METRICS)
        groups = post_json(base + "data/plugin/hparams/session_groups", {
            "experimentName": "", "startIndex": 0, "sliceSize": 100, "colParams": [],
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                "STATUS_RUNNING"],
        })["sessionGroups"]
    rows = {g["name"]: g for g in groups}
    assert set(names.values()) <= set(rows)
    for impl, run in names.items():
        assert rows[run]["hparams"]["ops.legendre_p3"] == impl
        # The per-step tags' last values: the run's final ones.
        values = {m["name"]["tag"]: m["value"] for m in rows[run]["metricValues"]}
        assert {"loss/train", "time/step_ms", "memory/saved_bytes"} <= set(values)
        assert values["memory/saved_bytes"] > 0 and values["time/step_ms"] > 0
