"""ops.<slot>=custom|builtin per op slot: defaults follow impl, the model runs the function
chosen for each slot, every mix trains as the builtin model, the choice is in the log and the
hparams, and it defines the run for resume=."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.tasks import TASKS
from fitting.train.checkpoint import load
from fitting.train.run import run
from fitting.train.validate import ConfigError
from tests.helpers.app_config import make_cfg

QUIET = ["log.figure_every=0", "log.hist_every=0", "log.every=1"]
# Short runs: every step is logged and compared.
SHORT = {
    "poly3": ["steps=200", "task.n_points=500"],
    "mlp": ["task=mlp", "steps=40", "task.n_points=64", "task.n_val=16", "task.hidden=[16,16]"],
    "cnn": ["task=cnn", "steps=4", "task.n_train=32", "task.n_val=8", "task.batch_size=4",
            "task.image_size=16", "task.channels=[4,8]"],
}
OPS = ("linear", "activation", "conv_bn", "legendre_p3")


def read_run(run_dir: Path) -> EventAccumulator:
    """All events of the TensorBoard run in `run_dir`."""
    return EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()


def train_curve(run_dir: Path) -> dict[int, float]:
    """step -> loss/train."""
    return {e.step: e.value for e in read_run(run_dir).Scalars("loss/train")}


def hparams(run_dir: Path) -> dict[str, object]:
    """The run's hparams as TensorBoard's HParams tab reads them."""
    content = read_run(run_dir).PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    return {k: v.string_value or v.number_value for k, v in start.hparams.items()}


def mixes(task: str) -> list[dict[str, str]]:
    """Every custom/builtin choice of the task's op slots (2**k of them)."""
    slots = TASKS[task].slots
    return [dict(zip(slots, c, strict=True)) for c in itertools.product(("custom", "builtin"),
                                                                        repeat=len(slots))]


def test_each_op_follows_impl_unless_given():
    assert {op: make_cfg().ops[op] for op in OPS} == dict.fromkeys(OPS, "custom")
    assert {op: make_cfg("impl=builtin").ops[op] for op in OPS} == dict.fromkeys(OPS, "builtin")
    cfg = make_cfg("task=cnn", "ops.conv_bn=builtin")
    assert {op: cfg.ops[op] for op in OPS} == {
        "linear": "custom", "activation": "custom", "conv_bn": "builtin", "legendre_p3": "custom"}
    cfg = make_cfg("impl=builtin", "ops.activation=custom")
    assert (cfg.ops.activation, cfg.ops.linear) == ("custom", "builtin")


def test_every_task_names_the_op_slots_it_runs():
    assert {name: option.slots for name, option in TASKS.items()} == {
        "poly3": ("legendre_p3",), "mlp": ("linear", "activation"),
        "cnn": ("conv_bn", "activation", "linear")}


def check_mixes_match_builtin(task: str, tmp_path: Path, caplog) -> None:
    """Each mix's loss/train curve is the all-builtin one's within 1e-4 relative at every
    logged step; its start line and hparams name each op's choice."""
    caplog.set_level(logging.INFO)
    base = [*SHORT[task], *QUIET]
    run(make_cfg(*base, "impl=builtin"), tmp_path / "builtin")
    reference = train_curve(tmp_path / "builtin")
    for i, mix in enumerate(mixes(task)):
        caplog.clear()
        out = tmp_path / f"mix{i}"
        run(make_cfg(*base, *(f"ops.{op}={spec}" for op, spec in mix.items())), out)
        curve = train_curve(out)
        assert sorted(curve) == sorted(reference), mix
        for step, want in reference.items():
            assert curve[step] == pytest.approx(want, rel=1e-4), (mix, step)
        choices = {f"ops.{op}": spec for op, spec in mix.items()}
        assert {k: v for k, v in hparams(out).items() if k.startswith("ops.")} == choices
        start = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("task="))
        assert " ".join(f"{k}={v}" for k, v in choices.items()) in start, start


@pytest.mark.parametrize("task", ["poly3", "mlp"])
def test_every_mix_trains_as_the_builtin_model(task, tmp_path, caplog):
    check_mixes_match_builtin(task, tmp_path, caplog)


@pytest.mark.slow
def test_every_cnn_mix_trains_as_the_builtin_model(tmp_path, caplog):
    check_mixes_match_builtin("cnn", tmp_path, caplog)


def test_a_mixed_run_resumes_and_its_ops_define_it(tmp_path):
    base = [*SHORT["cnn"], *QUIET, "ops.activation=builtin", "ops.conv_bn=builtin"]
    whole = run(make_cfg(*base, "steps=6"), tmp_path / "whole")
    run(make_cfg(*base, "steps=3"), tmp_path / "resumed")
    saved = load(tmp_path / "resumed")["config"]["ops"]
    assert saved == {"linear": "custom", "activation": "builtin", "conv_bn": "builtin",
                     "legendre_p3": "custom"}
    resumed = run(make_cfg(*base, "steps=6", f"resume={tmp_path / 'resumed'}"),
                  tmp_path / "resumed")
    assert resumed == whole
    cfg = make_cfg(*base, "steps=9", f"resume={tmp_path / 'resumed'}", "ops.activation=custom")
    with pytest.raises(ConfigError, match="the checkpoint is of a different run") as info:
        run(cfg, tmp_path / "resumed")
    assert "ops.activation: 'builtin' in the checkpoint, 'custom' here" in str(info.value)


def test_the_model_runs_the_function_chosen_for_each_slot():
    import torch

    from fitting.tasks import build_task
    from fitting.train.ops import model_ops, resolve_ops
    from models.layers import Linear, ReLU
    from models.ops.choice import OPS as OP_FUNCTIONS

    cpu = torch.device("cpu")
    cfg = make_cfg(*SHORT["mlp"], "ops.activation=builtin", "ops.conv_bn=builtin")
    resolved = resolve_ops(cfg, TASKS["mlp"].slots, cpu, torch.float32)
    # conv_bn is not the mlp's; linear follows impl.
    assert {slot: r.spec for slot, r in resolved.items()} == {
        "linear": "custom", "activation": "builtin"}
    chosen = model_ops(resolved)
    assert chosen == {"linear": OP_FUNCTIONS["linear"].custom, "activation": torch.relu}
    model = build_task(cfg.task, chosen, cpu, torch.float32, 0).model
    assert [type(m) for m in model] == [Linear, ReLU, Linear, ReLU, Linear]
    assert all(m.impl is torch.relu for m in model if isinstance(m, ReLU))
    assert all(m.impl is OP_FUNCTIONS["linear"].custom for m in model if isinstance(m, Linear))
