"""The fitting tasks the app offers, by name: `TASKS["mlp"]` is everything about task=mlp
(fitting.tasks.option.TaskOption); the tasks themselves are in poly3.py, mlp.py and cnn.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fitting.tasks.option import Task, TaskOption, squared_error
from fitting.tasks.options.cnn import OPTION as CNN
from fitting.tasks.options.mlp import OPTION as MLP
from fitting.tasks.options.poly3 import OPTION as POLY3

if TYPE_CHECKING:
    import torch

TASKS: dict[str, TaskOption] = {option.name: option for option in (POLY3, MLP, CNN)}


def build_task(
    cfg_task: Any,
    ops: Mapping[str, str | Callable[..., torch.Tensor]],
    device: torch.device,
    dtype: torch.dtype,
    seed: int,
) -> Task:
    """The task `cfg_task.name` with its data made from `seed` and its model built to run, in
    each of its op slots, the function `ops` maps that slot to (or "custom"/"builtin")."""
    import torch

    option = TASKS[cfg_task.name]
    generator = torch.Generator().manual_seed(seed)
    return option.build(cfg_task, {slot: ops[slot] for slot in option.slots}, device, dtype,
                        generator)
