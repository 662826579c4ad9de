"""A real TensorBoard server on loopback serves both impl runs of a sweep with their tags, and a
Custom Scalars page where every chart draws a line."""

from __future__ import annotations

import re

import pytest

from tests.helpers.sweep_fixtures import run_train_sweep, tensorboard_run_names, write_sweep
from tests.helpers.tensorboard_server import PARAM_TAGS, serve_and_check


@pytest.mark.slow
def test_tensorboard_serves_both_impl_runs_of_a_synthetic_sweep(tmp_path):
    write_sweep(tmp_path)
    want = {"loss/train", "memory/saved_bytes", "time/step_ms", *PARAM_TAGS}
    tags = serve_and_check(tmp_path, {"0_impl=custom": want, "1_impl=builtin": want})
    assert "loss/val" in tags["0_impl=custom"]


@pytest.mark.slow
def test_tensorboard_serves_both_impl_runs_of_a_real_sweep(tmp_path):
    run_train_sweep(tmp_path)
    names = tensorboard_run_names(tmp_path)
    assert set(names) == {"custom", "builtin"}
    want = {"loss/train", "memory/saved_bytes", "time/step_ms", "optim/grad_norm", *PARAM_TAGS}
    served = serve_and_check(tmp_path, {names["custom"]: want, names["builtin"]: want})
    charts = served.pop("custom scalars")
    logged = {tag for run_tags in served.values() for tag in run_tags}
    # poly3: no loss/val chart; its pair's mine − reference chart; no chart without a line.
    assert ["^loss/val$"] not in charts.values() and ["^loss/diff_train$"] in charts.values()
    assert [title for title, patterns in charts.items()
            if not any(re.search(p, tag) for p in patterns for tag in logged)] == []
