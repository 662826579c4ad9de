"""Shared fixtures: every device-agnostic test runs on CPU and, when present, on CUDA."""

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """A torch.device: cpu always, cuda when available (skipped otherwise)."""
    return torch.device(request.param)
