"""Count the bytes autograd saves for backward, each storage once."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class SavedBytes:
    """Running total of the bytes saved for backward inside a `saved_tensor_bytes()` block."""

    bytes: int = 0
    tensors: int = 0
    _seen: dict[int, weakref.ref] = field(default_factory=dict, repr=False)

    def _count(self, t: torch.Tensor) -> None:
        self.tensors += 1
        try:
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):
            # No plain storage (functorch-wrapped, sparse, ...): count the elements instead.
            self.bytes += t.numel() * t.element_size()
            return
        ref = self._seen.get(key)
        # The weak reference tells a storage still alive (already counted) from a new storage
        # that happens to reuse the address of a freed one.
        if ref is not None and ref() is not None:
            return
        self._seen[key] = weakref.ref(t)
        self.bytes += nbytes


@contextmanager
def saved_tensor_bytes() -> Iterator[SavedBytes]:
    """Count bytes saved for backward by forward passes inside the block (`saved.bytes`)."""
    saved = SavedBytes()

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved._count(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield saved
