"""run() as `python train.py <overrides> hydra.run.dir=<out>` runs it, without Hydra's process:
the config composed by Hydra's compose API (run() writes a new run's .hydra/ itself)."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import torch

from fitting.run import run
from tests.helpers.app_config import make_cfg

# The float32 data (sin) round by the CPU's kernels: the optimum of those data was 8.81716753217
# with AVX2 and AVX-512, 8.81716766537 with ATEN_CPU_CAPABILITY=default (1.5e-8 apart); 6x that.
OPTIMUM_RTOL = 1e-7


def float_data_optimum(said: list[str]) -> float:
    """The exact optimum of the float32 data, as the run names it."""
    found = [m for s in said if (m := re.search(
        r"; 0\.0143 relative above the exact optimum of the float32 data, ([\d.]+)$", s))]
    assert len(found) == 1, said
    return float(found[0][1])


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
