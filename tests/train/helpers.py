"""run() as `python train.py <overrides> hydra.run.dir=<out>` runs it, without Hydra's process:
the config composed by Hydra's compose API (run() writes a new run's .hydra/ itself)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import torch

from fitting.run import run
from tests.helpers.app_config import make_cfg


def go(out: Path, *overrides: str) -> float:
    """Run with `overrides` in `out`; the final loss."""
    return run(make_cfg(*overrides), out, list(overrides))


def results(out: Path) -> dict[str, Any]:
    """The run's results.json."""
    return json.loads((out / "results.json").read_text())


def saved(out: Path) -> dict[str, Any]:
    """The run's checkpoint.pt, as a resume reads it."""
    return torch.load(out / "checkpoint.pt", weights_only=True)


def same_weights(a: Path, b: Path) -> bool:
    """Whether two runs' checkpoints hold bit-identical models."""
    wa, wb = saved(a)["model"], saved(b)["model"]
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def signal_at(monkeypatch: Any, task_class: type, step: int, signum: int, times: int = 1) -> None:
    """Deliver `signum` (`times` times) to this process as the run draws the batch of `step`."""
    batch = task_class.batch

    def batch_then_signal(self: Any, at: int) -> Any:
        for _ in range(times if at == step else 0):
            signal.raise_signal(signum)
        return batch(self, at)

    monkeypatch.setattr(task_class, "batch", batch_then_signal)
