"""Count the bytes autograd saves for backward, each storage once."""

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass
class SavedBytes:
    """Totals for a `saved_tensor_bytes()` block: bytes of distinct storages, tensors saved."""

    bytes: int = 0
    tensors: int = 0


@contextmanager
def saved_tensor_bytes() -> Iterator[SavedBytes]:
    """Count bytes saved for backward by forward passes inside the block (`saved.bytes`)."""
    saved = SavedBytes()
    # Storage address -> weak reference to a tensor on it: a live entry means "already
    # counted"; a dead one means the address was freed and reused by a new storage.
    seen: dict[int, weakref.ref] = {}

    # The hook runs for every saved tensor of every forward (the app logs it each step), so
    # it is one flat function: no per-tensor method calls.
    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.tensors += 1
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            # No plain storage (functorch-wrapped, sparse, ...): count the elements instead.
            saved.bytes += t.numel() * t.element_size()
            return t
        key = storage.data_ptr()
        ref = seen.get(key)
        if ref is None or ref() is None:
            seen[key] = weakref.ref(t)
            saved.bytes += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield saved
