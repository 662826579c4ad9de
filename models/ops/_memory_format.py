"""The memory format aten infers from a 4-D tensor's strides (as `Tensor.suggest_memory_format`)."""

from __future__ import annotations

import torch

# The dims of an NCHW tensor from the smallest stride to the largest in channels_last order.
_CHANNELS_LAST_ORDER = (1, 3, 2, 0)


def suggest_memory_format(t: torch.Tensor) -> torch.memory_format:
    """torch.channels_last if `t`'s strides follow NHWC order, else torch.contiguous_format."""
    # aten's kernels (conv among them) pick their output layout with this same rule; torch
    # exposes it only to C++, so it is mirrored here, ambiguous cases falling back to NCHW.
    if t.layout != torch.strided or t.dim() != 4:
        return torch.contiguous_format
    sizes, strides = t.shape, t.stride()
    if strides[1] == 0:
        return torch.contiguous_format
    smallest = 0
    for d in _CHANNELS_LAST_ORDER:
        if sizes[d] == 0 or strides[d] < smallest:
            return torch.contiguous_format
        # N111-like tensors whose N stride equals C's could be either format: NCHW.
        if d == 0 and smallest == strides[1]:
            return torch.contiguous_format
        smallest = strides[d] * sizes[d] if sizes[d] > 1 else strides[d]
    return torch.channels_last
