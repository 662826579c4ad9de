"""checkpoint.pt: what it holds, when it is written, atomic writes, safe loading, and resuming
in-process (every optimizer and task) to exactly the uninterrupted run's parameters."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.train import checkpoint
from fitting.train.checkpoint import load, plain_config, save_atomic
from fitting.train.checkpoint_errors import CheckpointError
from fitting.train.resume import resume_config
from fitting.train.run import run
from fitting.train.validate import ConfigError
from tests.helpers.app_config import make_cfg

QUIET = ["log.figure_every=0", "log.hist_every=0"]
SMALL = {
    "poly3": ["task.n_points=200"],
    "mlp": ["task=mlp", "task.n_points=32", "task.n_val=16", "task.hidden=[8,8]"],
    "cnn": ["task=cnn", "task.n_train=48", "task.n_val=16", "task.batch_size=8",
            "task.image_size=16"],
}


def losses(run_dir: Path) -> dict[int, float]:
    """step -> loss/train of the TensorBoard run in `run_dir` (all its event files)."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    return {e.step: e.value for e in acc.Scalars("loss/train")}


def test_checkpoint_holds_the_run(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(checkpoint.Checkpointer, "save",
                        lambda self, state, status, save=checkpoint.Checkpointer.save:
                        (written.append((state.step, status)), save(self, state, status)))
    cfg = make_cfg("steps=7", "ckpt.every=3", "optimizer=adam", "log.every=1", *QUIET)
    run(cfg, tmp_path)
    assert written == [(3, "running"), (6, "running"), (7, "completed")]
    assert [p.name for p in tmp_path.glob("checkpoint*")] == ["checkpoint.pt"]  # no .tmp left

    saved = load(tmp_path)  # weights_only=True: plain data and tensors only
    assert (saved["format"], saved["status"], saved["step"]) == (2, "completed", 7)
    assert saved["config"] == plain_config(cfg)
    assert saved["config"]["task"]["name"] == "poly3" and saved["config"]["resume"] is None
    assert set(saved["model"]) == {"a", "b", "c", "d"}
    assert saved["optimizer"]["state"][0]["exp_avg"].shape == ()
    assert {"torch", "numpy", "python"} <= set(saved["rng"])
    loop, logged = saved["loop"], losses(tmp_path)
    assert "step_ms" not in loop  # a session's own step times are not the run's state
    assert (loop["step"], loop["converged"]) == (7, False) and loop["train_s"] > 0
    assert (loop["prev_loss"], loop["loss"]) == (pytest.approx(logged[5]), pytest.approx(logged[6]))


def test_no_periodic_checkpoint_with_every_0_but_one_at_the_end(tmp_path):
    run(make_cfg("steps=4", "ckpt.every=0", *QUIET), tmp_path)
    assert load(tmp_path)["step"] == 4


def test_weights_only_load_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("ran code from the checkpoint",))

    path = tmp_path / "checkpoint.pt"
    torch.save({"format": 1, "x": Evil()}, path)
    with pytest.raises(CheckpointError, match="not loaded") as info:
        load(tmp_path)
    assert isinstance(info.value.__cause__, pickle.UnpicklingError)
    assert "Weights only load failed" in str(info.value.__cause__)


def test_atomic_write_keeps_the_old_checkpoint_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_atomic({"step": 1}, path)

    def dies_midway(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        save_atomic({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"step": 1}


@pytest.mark.parametrize(
    ("task", "optimizer"),
    [
        ("poly3", ["optimizer=sgd", "optimizer.momentum=0.9", "optimizer.lr=1e-6"]),  # + momentum
        ("poly3", []),  # gd, the tutorial's
        ("poly3", ["optimizer=adam"]),
        ("poly3", ["optimizer=lbfgs", "optimizer.stop.patience=0"]),
        ("poly3", ["optimizer=newton", "optimizer.stop.patience=0", "dtype=float64"]),
        ("poly3", ["optimizer=lm", "optimizer.stop.patience=0"]),
        ("mlp", []),  # adam, validation set
        ("cnn", []),  # adam, minibatches, batch-norm statistics
    ],
)
def test_resumed_run_ends_bit_identical(task, optimizer, tmp_path):
    """A run of 5 steps extended to 12 with resume= equals a 12-step run: parameters, buffers,
    final loss, and every logged loss once (plus step 4, logged as the short run's last)."""
    base = [*SMALL[task], *optimizer, *QUIET]
    whole = run(make_cfg(*base, "steps=12"), tmp_path / "whole")
    run(make_cfg(*base, "steps=5"), tmp_path / "resumed")
    resumed = run(make_cfg(*base, "steps=12", f"resume={tmp_path / 'resumed'}"),
                  tmp_path / "resumed")
    assert resumed == whole
    a, b = load(tmp_path / "whole"), load(tmp_path / "resumed")
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    curve, reference = losses(tmp_path / "resumed"), losses(tmp_path / "whole")
    assert {s: v for s, v in curve.items() if s in reference} == reference
    assert set(curve) - set(reference) <= {4}
    assert (b["loop"]["step"], b["loop"]["loss"]) == (12, a["loop"]["loss"])
    assert len(list((tmp_path / "resumed").glob("events.out.tfevents.*"))) == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["task=mlp"], "task.name: 'poly3' in the checkpoint, 'mlp' here"),
        (["seed=1"], "seed: 0 in the checkpoint, 1 here"),
        (["optimizer.lr=1e-5"], "optimizer.lr: 5e-06 in the checkpoint, 1e-05 here"),
        (["steps=3"], "the run already did 3 steps; give steps= more than 3"),
    ],
)
def test_resume_refuses_another_run(overrides, message, tmp_path):
    run(make_cfg("steps=3", *QUIET), tmp_path)
    cfg = make_cfg("steps=6", *QUIET, f"resume={tmp_path}", *overrides)
    with pytest.raises(ConfigError, match="resume=") as info:
        run(cfg, tmp_path)
    assert message in str(info.value)


def test_resume_config_is_typed_like_a_composed_one(tmp_path):
    """resume= rebuilds the checkpoint's config with its schemas: enums are enums, unknown keys
    are refused, and the resumable overrides are applied."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    from fitting.config import Impl, OnNonFinite, typed_config
    from fitting.optim.options.adam import AdamConfig
    from fitting.tasks.options.mlp import MLPConfig, Target

    run(make_cfg(*SMALL["mlp"], "steps=3", *QUIET), tmp_path)
    overrides = ["steps=6", "on_nonfinite=raise", "log.every=2", f"resume={tmp_path}"]
    cfg = resume_config(make_cfg(*overrides), overrides, {"task": "poly3"})
    assert cfg.impl is Impl.custom and cfg.task.target is Target.sin
    assert cfg.on_nonfinite is OnNonFinite["raise"]
    assert (cfg.steps, cfg.log.every, cfg.resume) == (6, 2, str(tmp_path.resolve()))
    assert OmegaConf.get_type(cfg.task) is MLPConfig
    assert OmegaConf.get_type(cfg.optimizer) is AdamConfig
    with pytest.raises(ConfigAttributeError, match="Key 'nope' not in 'MLPConfig'"):
        cfg.task.nope = 1
    saved = load(tmp_path)["config"]
    assert plain_config(typed_config(saved)) == saved
    with pytest.raises(ConfigKeyError, match="nope"):
        typed_config({**saved, "task": {**saved["task"], "nope": 1}})


def test_resume_elsewhere_and_without_checkpoint_are_config_errors(tmp_path):
    run(make_cfg("steps=3", *QUIET), tmp_path / "a")
    with pytest.raises(ConfigError, match="continues that run in its own dir"):
        run(make_cfg("steps=6", f"resume={tmp_path / 'a'}"), tmp_path / "b")
    with pytest.raises(ConfigError, match="resume must be a run dir holding checkpoint.pt"):
        run(make_cfg("steps=6", f"resume={tmp_path / 'b'}"), tmp_path / "b")


def test_events_after_the_checkpoint_are_dropped_on_resume(tmp_path, monkeypatch):
    """A run that crashed 3 steps after its last checkpoint had logged those steps; resuming
    from the checkpoint logs them again, and TensorBoard shows each once (purge_step)."""
    from fitting.tasks.poly3 import Poly3Task

    def crash_at_step_8(self, step):
        if step == 8:
            raise RuntimeError("killed at step 8")
        return self.data

    with monkeypatch.context() as patch:
        patch.setattr(Poly3Task, "batch", crash_at_step_8)
        with pytest.raises(RuntimeError, match="killed"):
            run(make_cfg("steps=12", "ckpt.every=5", "log.every=1", *QUIET), tmp_path / "crashed")
    assert load(tmp_path / "crashed")["step"] == 5
    acc = EventAccumulator(str(tmp_path / "crashed"), size_guidance={"scalars": 0}).Reload()
    assert [e.step for e in acc.Scalars("loss/train")] == list(range(8))

    run(make_cfg("steps=12", "ckpt.every=5", "log.every=1", *QUIET, f"resume={tmp_path / 'crashed'}"),
        tmp_path / "crashed")
    run(make_cfg("steps=12", "ckpt.every=5", "log.every=1", *QUIET), tmp_path / "whole")
    for tag in ("loss/train", "params/b"):
        got = EventAccumulator(str(tmp_path / "crashed"), size_guidance={"scalars": 0})
        want = EventAccumulator(str(tmp_path / "whole"), size_guidance={"scalars": 0})
        got = [(e.step, e.value) for e in got.Reload().Scalars(tag)]
        assert got == [(e.step, e.value) for e in want.Reload().Scalars(tag)]
        assert [step for step, _ in got] == list(range(12))


def test_logging_settings_may_change_on_resume(tmp_path):
    run(make_cfg("steps=4", "log.every=1", *QUIET), tmp_path)
    run(make_cfg("steps=8", "log.every=2", "ckpt.every=0", "threads=2", *QUIET,
                 f"resume={tmp_path}"), tmp_path)
    assert sorted(losses(tmp_path)) == [0, 1, 2, 3, 4, 6, 7]


@pytest.mark.parametrize(
    "run_dir",
    ["/tmp/outputs/2026-01-01/12-00-00-000001", "/tmp/sweep/0_impl=custom,task=mlp",
     "/tmp/my runs/a", "/tmp/it's", '/tmp/a"b$c'],
)
def test_resume_command_survives_the_shell_and_hydras_grammar(run_dir):
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fitting.train.signals import resume_command

    python, script, *args = shlex.split(resume_command(run_dir))
    assert (python, script) == ("python", "train.py") and len(args) == 1
    (override,) = OverridesParser.create().parse_overrides(args)
    assert (override.key_or_group, override.value()) == ("resume", run_dir)
