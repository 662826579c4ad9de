"""Hypothesis strategies for the layout properties: a tensor's values as a view of a leaf in an
odd memory layout (channels_last, strided with an offset, transposed, expanded), and the check
every op meets: ours on the views equals its twin on dense copies."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

LAYOUTS = ("contiguous", "channels_last", "strided", "transposed", "expanded")
DTYPES = st.sampled_from([torch.float32, torch.float64])
# Modest and deterministic: the properties run in every suite run, in a few seconds.
PROPERTY = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def odd(t: torch.Tensor, kind: str, requires_grad: bool = False):
    """(leaf, view): `view` has t's shape (t's values, except `expanded`: t[:1]'s broadcast
    along dim 0) in layout `kind`, and is a differentiable view of the leaf."""
    if kind == "channels_last" and t.dim() == 4:
        def view(b):
            return b.permute(0, 3, 1, 2)
        base = t.permute(0, 2, 3, 1).contiguous()
    elif kind == "strided" and t.dim():
        def view(b):  # every other element, from an offset of 1
            return b[..., 1]
        base = torch.stack([torch.zeros_like(t), t], -1)
    elif kind == "transposed" and t.dim() > 1:
        def view(b):
            return b.permute(*reversed(range(t.dim())))
        base = view(t).contiguous()
    elif kind == "expanded" and t.dim() and t.shape[0]:
        def view(b):
            return b.expand(t.shape)
        base = t[:1].clone()
    else:
        def view(b):
            return b
        base = t.clone()
    leaf = base.detach().requires_grad_(requires_grad)
    return leaf, view(leaf)


def layouts(n: int, kinds=LAYOUTS) -> st.SearchStrategy[tuple[str, ...]]:
    """n layout kinds, one per tensor."""
    return st.tuples(*[st.sampled_from(kinds)] * n)


def tolerance(dtype: torch.dtype) -> dict:
    """assert_close's tolerance between different kernels (layouts change the sums' order)."""
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-9,
                                                                        "atol": 1e-9}


def grads(out: torch.Tensor, leaves: list[torch.Tensor], grad_out: torch.Tensor) -> list:
    """d(out · grad_out)/d(leaf) for the leaves that require grad (zeros where unused)."""
    need = [t for t in leaves if t.requires_grad]
    if not need:
        return []
    return list(torch.autograd.grad(out, need, grad_out, allow_unused=True,
                                    materialize_grads=True))


def assert_all_close(got: list, want: list, names: list[str], dtype: torch.dtype) -> None:
    """assert_close, pair by pair, naming the result that differs."""
    assert len(got) == len(want), names
    for name, a, b in zip(names, got, want, strict=False):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"{name}: {m}",
                                   **tolerance(dtype))
