"""Shared pieces of the property tests (tests/test_properties_*.py): hypothesis settings,
snapshots of inputs, gradients, error bounds.

The rule every property checks: each call either matches its built-in twin within a
dtype-derived error bound or raises the op's clear ValueError/TypeError, and impl="builtin"
raises the same class. Bugs found by the properties are pinned by strict xfails next to the
property that found them; the strategies avoid exactly those inputs (marked KNOWN BUG) until
the fix, when the xfail turns XPASS and both should go.

Hypothesis throws random shapes, dtypes, devices, strided views and requires_grad subsets at
every op and layer. Runs are deterministic (derandomize=True, no example database) and ~10 s
per file on 2 busy cores. For a deeper search, run a test with more examples and
derandomize=False. Some xfails are upstream torch kernel bugs the op inherits; they apply only
where the plain torch twin shows them on the machine running the tests.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.helpers.strategies import DEVICES, Arg, assert_close_bound, grad_output

OP = "fused_conv_bn2d"
PROPERTY_MARKS = [
    pytest.mark.usefixtures("one_thread"),  # tests/conftest.py
    # PyTorch's own notes: padding='same' with an even kernel, and init of an empty weight.
    pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel"),
    pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op"),
    pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental"),
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state"),
]


def props(n: int):
    """Deterministic, database-free hypothesis settings running `n` examples."""
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        # Drawing tensors through st.data() is slower than hypothesis expects of a strategy;
        # that is the cost of the inputs, not a sign of excessive filtering.
        suppress_health_check=[HealthCheck.too_slow],
    )


def snapshot(args):
    return [None if a is None else a.leaf.detach().clone() for a in args]


def assert_unchanged(before, args):
    """Ops may work in place on their own buffers, never on their inputs."""
    for b, a in zip(before, args, strict=True):
        if b is not None:
            torch.testing.assert_close(a.leaf.detach(), b, rtol=0, atol=0, equal_nan=True)


def grads(out: torch.Tensor, leaves, g: torch.Tensor) -> list[torch.Tensor]:
    """d(out)/d(leaf)·g for each leaf that requires grad (zeros for unused ones)."""
    need = [t for t in leaves if t is not None and t.requires_grad]
    if not need or not out.requires_grad:
        return []
    return list(torch.autograd.grad(out, need, g, materialize_grads=True))


def abs_param(p: torch.Tensor | None) -> torch.Tensor | None:
    """|p| in float64 on the CPU, a leaf requiring grad like p: for error bounds."""
    if p is None:
        return None
    return p.detach().to("cpu", torch.float64).abs().requires_grad_(p.requires_grad)


def leaves(*args: Arg | None) -> list[torch.Tensor | None]:
    return [None if a is None else a.leaf for a in args]


def t(a: Arg | None) -> torch.Tensor | None:
    return None if a is None else a.tensor


def abs64(a: Arg | None):
    """(leaf, view) over |a| in float64, or (None, None)."""
    return (None, None) if a is None else a.abs64()


def compare(outs_c, outs_b, bounds, dtype, what, n=0):
    """Pairwise assert_close_bound; n bounds the length of the sums behind the results."""
    assert len(outs_c) == len(outs_b) == len(bounds), what
    for i, (c, b, bound) in enumerate(zip(outs_c, outs_b, bounds, strict=True)):
        assert_close_bound(c, b, bound, dtype, n=n, what=f"{what}[{i}]")


def per_tensor(ts):
    """Bounds for results of the same aten kernels: each tensor's largest magnitude."""
    return [x.detach().abs().nan_to_num(0.0).max() if x.numel() else 0.0 for x in ts]


def int_or_pair(lo, hi):
    """An int in [lo, hi] or a pair (tuple or list) of them, as conv arguments are given."""
    n = st.integers(lo, hi)
    return st.one_of(n, st.tuples(n, n), st.lists(n, min_size=2, max_size=2))


def mostly(good, bad, k: int = 5):
    """`good` k times out of k + 1, else `bad`."""
    return st.integers(0, k).flatmap(lambda i: bad if i == 0 else good)


def other_device(device: str) -> str:
    return next(d for d in DEVICES if d != device)


STATS = ("running_mean", "running_var")


def conv_bn_eval_abs(x, w, gamma, beta, mean, var, eps, stride, padding, dilation, groups):
    """Eval-mode conv → BN on |inputs|: bounds the error of folding BN into the conv."""
    s = (var + eps).rsqrt()
    if gamma is not None:
        s = s * gamma
    shift = mean * s if beta is None else mean * s + beta
    y = F.conv2d(x, w, None, stride, padding, dilation, groups)
    return y * s.view(-1, 1, 1) + shift.view(-1, 1, 1)


def conv_bn_train_grad_abs(absed, values, g, eps, stride, padding, dilation, groups):
    """Bounds for training-mode conv → BN gradients (x, weight, bn_weight, bn_bias, those that
    require grad): the sizes of the terms batch norm's backward adds, |γ|/σ·(|g| + mean|g| +
    |x̂|·mean|g·x̂|), carried through the conv's backward on |x|, |w|; Σ|g·x̂| and Σ|g| for γ, β.

    `absed`: {name: (leaf, view)} over |inputs| (abs64); `values`: the inputs x, weight and
    bn_weight (or None) whose batch statistics x̂ and σ are taken.
    """
    conv = (stride, padding, dilation, groups)
    x, w, gamma = (None if v is None else v.detach().to("cpu", torch.float64) for v in values)
    dims, per_channel = (0, 2, 3), (1, -1, 1, 1)
    y = F.conv2d(x, w, None, *conv)
    var = y.var(dims, unbiased=False, keepdim=True)
    xhat = ((y - y.mean(dims, keepdim=True)) * (var + eps).rsqrt()).abs()
    ga = g.detach().to("cpu", torch.float64).abs()
    scale = (var + eps).rsqrt() * (1.0 if gamma is None else gamma.abs().view(per_channel))
    gy = scale * (ga + ga.mean(dims, keepdim=True) + xhat * (ga * xhat).mean(dims, keepdim=True))
    # One sum whose gradients are the bounds: conv(|x|, |w|)·gy, x̂·|γ|·|g|, |β|·|g|.
    total = (F.conv2d(absed["x"][1], absed["weight"][1], None, *conv) * gy).sum()
    if absed["bn_weight"][1] is not None:
        total = total + (xhat * ga * absed["bn_weight"][1].view(per_channel)).sum()
    if absed["bn_bias"][1] is not None:
        total = total + (ga * absed["bn_bias"][1].view(per_channel)).sum()
    leaves = [absed[k][0] for k in ("x", "weight", "bn_weight", "bn_bias")]
    need = [t for t in leaves if t is not None and t.requires_grad]
    return list(torch.autograd.grad(total, need, materialize_grads=True)) if need else []


def bn_grad_output(draw, out: torch.Tensor) -> torch.Tensor:
    """A random incoming gradient for a batch-norm output.

    KNOWN BUG (upstream, xfail in tests/ops/test_conv_bn_upstream_bugs.py): aten's CPU
    batch-norm backward, and so the builtin twin, gets its gradients wrong for some grad_outputs
    in the other memory format than the output (NCHW-only output with a channels_last-only
    gradient, or the reverse); such a gradient is made contiguous in the output's format. All
    other strided layouts are kept. (The custom op on those layouts is checked against
    contiguous copies in tests/ops/test_fused_conv_bn_layouts.py.)
    """
    g = grad_output(draw, out)
    formats = (torch.contiguous_format, torch.channels_last)
    if g.dim() == 4 and g.numel():
        flags = [[t.is_contiguous(memory_format=f) for f in formats] for t in (out, g)]
        if flags[0] in ([True, False], [False, True]) and flags[1] == flags[0][::-1]:
            g = g.contiguous(memory_format=formats[flags[0].index(True)])
    return g


def bf16_depthwise_multiplier_bug(x: torch.Tensor, weight: torch.Tensor, groups, out) -> bool:
    """KNOWN BUG (upstream, xfail in tests/ops/test_conv_bn_upstream_bugs.py): aten's CPU bfloat16
    conv gives wrong outputs for a grouped conv with one input channel and several output
    channels per group when its output is channels_last (seen with stride (1, 2)): both impls
    share the wrong result, so such calls are skipped."""
    return (
        x.dtype == torch.bfloat16
        and isinstance(groups, int)
        and groups > 1
        and weight.dim() == 4
        and weight.shape[1] == 1
        and weight.shape[0] > groups
        and out.dim() == 4
        and out.is_contiguous(memory_format=torch.channels_last)
    )
