"""The fitting tasks the app offers, by name: `TASKS["mlp"]` is everything about task=mlp
(fitting.tasks.spec.TaskSpec); the tasks themselves are in poly3.py, mlp.py and cnn.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fitting.tasks.spec import Task, TaskSpec, squared_error
from fitting.tasks.specs.cnn import SPEC as CNN
from fitting.tasks.specs.mlp import SPEC as MLP
from fitting.tasks.specs.poly3 import SPEC as POLY3

if TYPE_CHECKING:
    import torch

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (POLY3, MLP, CNN)}


def build_task(
    cfg_task: Any,
    impl: str,
    device: torch.device,
    dtype: torch.dtype,
    seed: int,
    ops: Mapping[str, Callable[..., torch.Tensor]] | None = None,
) -> Task:
    """The task `cfg_task.name` with its data made from `seed` and its model built with `impl`;
    each op in `ops` then runs through the function it maps to (models.swap.swap_op)."""
    import torch

    from models.swap import swap_op

    generator = torch.Generator().manual_seed(seed)
    task = TASKS[cfg_task.name].build(cfg_task, impl, device, dtype, generator)
    for op, fn in (ops or {}).items():
        task.model = swap_op(task.model, op, fn)
    return task
