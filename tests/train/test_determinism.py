"""Same config and seed, same run (CPU): identical loss curves and parameters; the seed sets the
data and the initial weights; deterministic=true runs and leaves torch's flag as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.train.checkpoint import load
from fitting.train.run import run
from tests.helpers.app_config import make_cfg

STEPS = 20
SMALL = {
    "poly3": ["task.n_points=200"],
    "mlp": ["task=mlp", "task.n_points=32", "task.n_val=16", "task.hidden=[8,8]",
            "task.noise=0.1"],
    "cnn": ["task=cnn", "task.n_train=48", "task.n_val=16", "task.batch_size=8",
            "task.image_size=16"],
}
QUIET = [f"steps={STEPS}", "log.every=1", "log.figure_every=0", "log.hist_every=0",
         "ckpt.every=0"]


def fit(tmp_path: Path, name: str, *overrides: str) -> tuple[list[float], dict]:
    """The loss/train curve (every step) and final model state of a run with `overrides`."""
    out = tmp_path / name
    run(make_cfg(*overrides, *QUIET), out)
    acc = EventAccumulator(str(out), size_guidance={"scalars": 0}).Reload()
    curve = [e.value for e in acc.Scalars("loss/train")]
    return curve, load(out)["model"]


def same_state(a: dict, b: dict) -> bool:
    """Bitwise equal state dicts."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("task", ["poly3", "mlp", "cnn"])
def test_same_seed_same_curve(task, tmp_path):
    first, state1 = fit(tmp_path, "1", *SMALL[task], "seed=3")
    second, state2 = fit(tmp_path, "2", *SMALL[task], "seed=3")
    assert len(first) == STEPS
    assert first == second  # exact float equality at every step
    assert same_state(state1, state2)


@pytest.mark.parametrize("task", ["mlp", "cnn"])
def test_another_seed_another_curve(task, tmp_path):
    """The seed draws mlp's noise and initial weights and cnn's images, weights and minibatches
    (poly3 has neither random data nor random initial values: its seed changes nothing)."""
    first, _ = fit(tmp_path, "1", *SMALL[task], "seed=3")
    other, _ = fit(tmp_path, "2", *SMALL[task], "seed=4")
    assert first[0] != other[0] and first[-1] != other[-1]


def test_deterministic_flag(tmp_path, monkeypatch):
    seen = []
    real = torch.use_deterministic_algorithms
    monkeypatch.setattr(torch, "use_deterministic_algorithms",
                        lambda on, **kw: (seen.append(on), real(on, **kw)))
    before = torch.are_deterministic_algorithms_enabled()
    plain, state = fit(tmp_path, "plain", *SMALL["mlp"])
    strict, strict_state = fit(tmp_path, "strict", *SMALL["mlp"], "deterministic=true")
    assert seen == [True, before]  # on for the run, then back as it was
    assert torch.are_deterministic_algorithms_enabled() == before
    assert strict == plain and same_state(state, strict_state)
