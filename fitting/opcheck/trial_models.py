"""The task models each op is tried in, built from `models/` directly (no app config).

Sizes, data and optimizer settings follow the app's task defaults (conf/task, task_optimizer
*_sgd): plain SGD, because Adam's per-parameter scaling would hide a gradient off by a factor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from fitting.tasks.data import param_scale, rasterize_curves, sample_curve_params
from models.cnn import CurveCNN
from models.mlp import MLP
from models.poly3 import Poly3

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class TaskModel:
    """A task's model builder, one fixed batch, its loss reduction and SGD settings."""

    name: str
    # (impl, device, ops) -> float32 model, `ops` mapping an op slot to the function it runs
    build: Callable[[str, torch.device, dict], nn.Module]
    batch: Callable[[torch.device, bool], Batch]  # (device, quick) -> (inputs, targets)
    reduction: str
    lr: float
    momentum: float
    steps: int
    describe: str  # {n}: the batch size


def _line_batch(n: int) -> Callable[[torch.device, bool], Batch]:
    def batch(device: torch.device, quick: bool) -> Batch:
        x = torch.linspace(-math.pi, math.pi, n, dtype=torch.float64).view(-1, 1)
        return x.to(device, torch.float32), torch.sin(x).to(device, torch.float32)

    return batch


def _poly3_batch(device: torch.device, quick: bool) -> Batch:
    x, y = _line_batch(2000)(device, quick)
    return x.view(-1), y.view(-1)


def _cnn_batch(device: torch.device, quick: bool) -> Batch:
    g = torch.Generator().manual_seed(0)
    params = sample_curve_params(16 if quick else 64, g)
    images = rasterize_curves(params, 32, 0.1, g)
    mean, scale = param_scale()
    return images.to(device, torch.float32), ((params - mean) / scale).to(device, torch.float32)


TASKS: dict[str, TaskModel] = {
    "mlp": TaskModel(
        "mlp", lambda impl, device, ops: MLP(1, (64, 64), 1, impl=impl, device=device, **ops),
        _line_batch(256), "mean", 0.05, 0.0, 40, "MLP 1-64-64-1, sin on {n} points",
    ),
    "poly3": TaskModel(
        "poly3",
        lambda impl, device, ops: Poly3(impl=ops.get("legendre_p3", impl), device=device),
        _poly3_batch, "sum", 5e-6, 0.0, 40, "a + b·P3(c + d·x), sin on {n} points",
    ),
    "cnn": TaskModel(
        "cnn", lambda impl, device, ops: CurveCNN(32, (8, 16), impl=impl, device=device, **ops),
        _cnn_batch, "mean", 0.01, 0.9, 20, "CurveCNN 32x32, channels 8-16, batch of {n} images",
    ),
}  # fmt: skip
# The task each op is tried in.
OP_TASK = {"activation": "mlp", "linear": "mlp", "legendre_p3": "poly3", "conv_bn": "cnn"}


def build(
    task: TaskModel,
    impl: str = "builtin",
    device: torch.device | str = "cpu",
    seed: int = 0,
    ops: dict[str, Callable[..., torch.Tensor]] | None = None,
) -> nn.Module:
    """`task`'s model with `impl` for every op but those `ops` gives a function for (slot ->
    function), initialized from `seed` without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return task.build(impl, torch.device(device), dict(ops or {}))


def loss(task: TaskModel, model: nn.Module, batch: Batch) -> torch.Tensor:
    """The task's loss: sum or mean of the squared residuals."""
    inputs, targets = batch
    sq = (model(inputs) - targets).pow(2)
    return sq.sum() if task.reduction == "sum" else sq.mean()


def describe(task: TaskModel, batch: Batch) -> str:
    """The task's model and data in a few words, e.g. 'MLP 1-64-64-1, sin on 256 points'."""
    return task.describe.format(n=len(batch[0]))
