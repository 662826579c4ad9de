"""Saved-for-backward bytes inside the task models: what each op adds, storages counted once,
and every custom task model saving no more than its built-in twin."""

import pytest
import torch
import torch.nn.functional as F

from fitting.opcheck.memory import SavedAttribution, op_in_model, task_saved_bytes
from models.ops import relu, relu_masked
from models.ops.choice import OPS

CPU = torch.device("cpu")


def test_a_storage_saved_by_the_op_and_its_neighbour_counts_once():
    x = torch.randn(32, 16, requires_grad=True)
    w = torch.randn(8, 16, requires_grad=True)
    for fn, added in ((relu, 0), (relu_masked, x.numel()), (torch.relu, 0)):
        counter = SavedAttribution()
        op = counter.wrap(fn)
        found = counter.measure(lambda op=op: F.linear(op(x), w))
        assert found.added_by_op == added
        assert found.total == x.nbytes + w.nbytes + added


def test_relu_adds_nothing_to_the_mlp_and_relu_masked_its_mask():
    found = op_in_model("activation", relu, torch.relu, CPU)
    assert (found.added, found.twin_added, found.total) == (0, 0, found.twin_total)
    masked = op_in_model("activation", relu_masked, torch.relu, CPU)
    assert masked.added == 2 * 256 * 64  # two hidden layers of 256 points x 64, 1 byte each
    assert masked.total == found.total + masked.added


@pytest.mark.parametrize("op", sorted(OPS))
def test_no_custom_op_adds_more_than_its_twin_in_its_model(op):
    found = op_in_model(op, OPS[op].custom, OPS[op].builtin, CPU)
    assert found.added <= found.twin_added and found.total <= found.twin_total


def test_every_custom_task_model_saves_no_more_than_the_builtin():
    ratios = {}
    for task in ("poly3", "mlp", "cnn"):
        saved = task_saved_bytes(task, CPU)
        ratios[task] = saved["custom"] / saved["builtin"]
    assert ratios["poly3"] <= 1.0 and ratios["mlp"] <= 1.0
    assert ratios["cnn"] < 0.74  # the mask-saving ReLU's cnn saved 0.74x


def test_bench_reports_bytes_inside_the_models(one_thread):
    from fitting.bench.ops import bench_in_models

    rows = {r["name"].split(",")[0]: r for r in bench_in_models(CPU, t=0.005, quick=True)}
    relu_row = rows["activation in mlp (bytes: added to the model)"]
    assert (relu_row["custom_bytes"], relu_row["builtin_bytes"], relu_row["bytes_ratio"]) == (0, 0, 1.0)
    masked = rows["relu_masked in mlp (bytes: added to the model)"]
    assert (masked["custom_bytes"], masked["builtin_bytes"]) == (2 * 256 * 64, 0)
    assert rows["conv_bn in cnn (bytes: added to the model)"]["bytes_ratio"] < 0.25
    assert rows["mlp model"]["bytes_ratio"] == rows["poly3 model"]["bytes_ratio"] == 1.0
    assert rows["cnn model"]["bytes_ratio"] < 0.74
    assert all(r["custom_ms"] > 0 and r["builtin_ms"] > 0 for r in rows.values())
