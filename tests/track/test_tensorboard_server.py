"""A real TensorBoard server on loopback serves both impl runs of a sweep with their tags."""

from __future__ import annotations

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
    serve_and_check(tmp_path, {names["custom"]: want, names["builtin"]: want})
