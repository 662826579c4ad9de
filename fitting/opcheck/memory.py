"""Bytes a model saves for backward, and the bytes one op adds to that set.

A storage saved by the op and by another layer (ReLU's output, which the next Linear saves as
its input) is kept once by autograd, so it is not counted as the op's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fitting.opcheck.trial_models import OP_TASK, TASKS, build, loss
from models.ops.memory import saved_tensor_bytes


@dataclass
class ModelBytes:
    """Bytes of distinct storages saved for backward: all of them, and those only the op saved."""

    total: int
    added_by_op: int


def _storage(t: torch.Tensor) -> tuple[int, int]:
    """(key, bytes) of t's storage; tensors without one (functorch-wrapped) count by id."""
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return id(t), t.numel() * t.element_size()


class SavedAttribution:
    """Records the storages saved for backward inside `recording()`, split into those saved
    while a function wrapped by `wrap` runs (the op) and all others."""

    def __init__(self) -> None:
        self.depth = 0
        self.by_op: dict[int, int] = {}
        self.by_rest: dict[int, int] = {}

    def wrap(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`fn`, with what it saves counted as the op's."""

        def op(*args):
            self.depth += 1
            try:
                return fn(*args)
            finally:
                self.depth -= 1

        return op

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key, nbytes = _storage(t)
        (self.by_op if self.depth else self.by_rest)[key] = nbytes
        return t

    def measure(self, forward: Callable[[], torch.Tensor]) -> ModelBytes:
        """Run `forward()` and count: all distinct storages, and those only the op saved."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            out = forward()  # kept alive until counted: no storage is freed and reused meanwhile
        added = sum(n for key, n in self.by_op.items() if key not in self.by_rest)
        total = sum({**self.by_rest, **self.by_op}.values())
        del out
        return ModelBytes(total, added)


@dataclass
class InModel:
    """An op inside its task's model, against its twin there: totals and the bytes each adds."""

    task: str
    total: int
    twin_total: int
    added: int
    twin_added: int


def op_in_model(op: str, fn, twin, device: torch.device, quick: bool = False) -> InModel:
    """Saved bytes of one training forward of `op`'s task model running `fn`, and running
    `twin`, as the op (every other layer built-in)."""
    task = TASKS[OP_TASK[op]]
    batch = task.batch(device, quick)
    found = []
    for f in (fn, twin):
        counter = SavedAttribution()
        model = build(task, "builtin", device, ops={op: counter.wrap(f)})
        found.append(counter.measure(lambda m=model: loss(task, m, batch)))
    return InModel(task.name, found[0].total, found[1].total, found[0].added_by_op,
                   found[1].added_by_op)


def task_saved_bytes(task_name: str, device: torch.device, quick: bool = False) -> dict[str, int]:
    """Saved bytes of one training forward of the task's model, impl -> bytes."""
    task = TASKS[task_name]
    batch = task.batch(device, quick)
    out = {}
    for impl in ("custom", "builtin"):
        model = build(task, impl, device)
        with saved_tensor_bytes() as saved:
            loss(task, model, batch)
        out[impl] = saved.bytes
    return out
