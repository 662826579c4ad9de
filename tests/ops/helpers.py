"""What the op and model tests share: the devices to run on and the edge values of a float."""

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="CUDA not available")),
]
INF, NAN = float("inf"), float("nan")
EDGES = [0.0, -0.0, INF, -INF, NAN, 1e-30, -1e-30, 1e30, -1e30]


def grads(out: torch.Tensor, inputs, grad_out: torch.Tensor, **kw) -> tuple:
    """d(out · grad_out)/d(inputs), zeros for an input out does not depend on."""
    return torch.autograd.grad(out, inputs, grad_out, allow_unused=True, materialize_grads=True,
                               **kw)
