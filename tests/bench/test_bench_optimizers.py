"""python -m fitting.bench.optimizers: each planned optimizer builds, runs and lands where the
benchmark table in docs/benchmarks.md says (the second-order ones at the optimum, sgd above)."""

from __future__ import annotations

import pytest
import torch

from fitting.bench.optimizers import PLAN, run
from fitting.tasks.poly3_optimum import exact_poly3_optimum

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("name", list(PLAN))
def test_each_planned_optimizer_runs_its_iterations(name):
    optimum = exact_poly3_optimum(torch.float64).loss
    result = run(name, "custom", torch.float64, optimum)
    iterations, label, _ = PLAN[name]
    assert (result.label, result.iterations) == (label, iterations)
    if name == "sgd":
        assert result.reached is None and result.rel_gap == pytest.approx(0.0143, abs=5e-4)
    else:
        assert result.reached is not None and abs(result.rel_gap) <= 1e-6
