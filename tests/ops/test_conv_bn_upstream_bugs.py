"""fused_conv_bn2d inputs where torch's own kernels are wrong ("bad tensors").

Found by the property tests (tests/ops/test_properties_conv_bn.py). Each bug of the twin is a
strict xfail that applies only where the plain torch twin shows it on the machine running the
tests (_upstream_bug), so a torch that fixes it turns the test green instead of XPASS. Where
the custom op works around a bug, its case is a plain test next to the xfail.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.ops import (
    fused_conv_bn2d,
)
from tests.helpers.property_checks import PROPERTY_MARKS, STATS

pytestmark = PROPERTY_MARKS


def _bn_backward_case(name: str):
    """(x, conv weight, options, BN tensors, grad_out) of an upstream batch-norm backward bug."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    bn = {"bn_weight": randn(5), "running_mean": randn(5), "running_var": randn(5).abs() + 0.5}
    if name == "strided-bn_weight-1x1-output":
        x, w, options = randn(4, 3, 1, 1), randn(5, 3, 1, 1), {}
        bn["bn_weight"] = randn(10)[::2]
    elif name == "grad_out-channels_last-output-nchw":
        # output (1, 5, 3, 1): NCHW-contiguous only; grad_out strides (15, 1, 5, 1):
        # channels_last-contiguous only
        x, w, options = randn(1, 1, 3, 3), randn(5, 1, 1, 2), {"dilation": 2}
        return x, w, options, bn, randn(1, 3, 5, 1).permute(0, 2, 1, 3)
    else:  # "strided-running-stats-channels_last-output"
        x = randn(2, 2, 2, 3).permute(0, 3, 1, 2)  # channels_last (2, 3, 2, 2)
        w, options = randn(5, 3, 1, 1), {}
        # Step-2 slices: read as contiguous, the kernel still stays inside their storage
        # (an expand(5) of one element also triggers it, but by reading out of bounds).
        bn["running_mean"] = randn(10)[::2]
        bn["running_var"] = (randn(10).abs() + 0.5)[::2]
        return x, w, options, bn, randn(2, 2, 2, 5).permute(0, 3, 1, 2)  # channels_last
    return x, w, options, bn, randn(F.conv2d(x, w, None, 1, 0, options.get("dilation", 1)).shape)


BN_BACKWARD_CASES = [
    "strided-bn_weight-1x1-output",
    "grad_out-channels_last-output-nchw",
    "strided-running-stats-channels_last-output",
]
# (case, training): where the builtin twin's result is wrong. Running stats are read only in
# eval mode. The custom op hands the kernels layouts they read right, in both modes.
UPSTREAM_BN_BACKWARD = [
    ("strided-bn_weight-1x1-output", True),
    ("strided-bn_weight-1x1-output", False),
    ("grad_out-channels_last-output-nchw", True),
    ("grad_out-channels_last-output-nchw", False),
    ("strided-running-stats-channels_last-output", False),
]


def _upstream_bug(check) -> bool:
    """Whether an upstream kernel bug shows on this machine's torch build (`check` raises).

    The xfails of upstream bugs apply only where the plain torch twin reproduces them: their
    kernels differ with the CPU and build, and where torch gets it right the op must too.
    """
    try:
        check()
    except Exception:  # noqa: BLE001 - any failure of the twin is the bug showing
        return True
    return False


def _bn_backward_layouts_check(case, impl, training):
    # Repeated: the running-stats case reads memory it shouldn't, and is wrong only in ~3 of
    # 4 calls (all of 20 calls right has odds of ~1e-13 while the bug lasts).
    for _ in range(20):
        got, want = _bn_backward_grads(case, impl, training)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def _bn_backward_grads(case, impl, training):
    """Output, gradients for x, conv weight, bn_weight and the running stats after the call:
    with the case's layouts, and with every tensor made contiguous."""
    x, w, options, bn, grad_out = _bn_backward_case(case)
    leaves_ = [x.requires_grad_(), w.requires_grad_(), bn["bn_weight"].requires_grad_()]
    results = []
    for layout in (lambda t: t, lambda t: t.contiguous()):
        # Fresh running stats for each call, in the case's layout (training updates them in
        # place: the caller's strided tensors must get the update).
        stats = [layout(_copy_with_strides(bn[k])) for k in STATS]
        out = fused_conv_bn2d(
            layout(x), w, layout(bn["bn_weight"]), None, *stats, training=training,
            **options, impl=impl,
        )  # fmt: skip
        grads_ = torch.autograd.grad(out, leaves_, layout(grad_out))
        results.append([out.detach(), *grads_, *stats])
    return results


def _copy_with_strides(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with its strides (clone makes a non-dense tensor contiguous)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


_BN_LAYOUTS_REASON = (
    "silently wrong gradients from an upstream aten CPU bug: native_batch_norm_backward on a "
    "channels_last input (a 1x1 output always is) reads a strided bn_weight / running_mean / "
    "running_var as if contiguous (wrong values, even out-of-bounds garbage like 1e+214), and "
    "mishandles a grad_output in the other memory format than the input. Hit by "
    "impl='builtin' (F.batch_norm as is); the custom op hands the kernel contiguous "
    "per-channel tensors and a grad_output in its input's memory format"
)


def _bn_backward_xfail(case, training):
    """The upstream xfail of a builtin case listed in UPSTREAM_BN_BACKWARD, else no mark."""
    if (case, training) not in UPSTREAM_BN_BACKWARD:
        return ()
    return pytest.mark.xfail(
        # probed with the twin itself (impl="builtin" is F.conv2d -> F.batch_norm as is)
        _upstream_bug(lambda: _bn_backward_layouts_check(case, "builtin", training)),
        strict=True,
        raises=AssertionError,
        reason=_BN_LAYOUTS_REASON,
    )


@pytest.mark.parametrize(
    "case, training",
    [
        pytest.param(case, training, marks=_bn_backward_xfail(case, training))
        for case in BN_BACKWARD_CASES
        for training in (True, False)
    ],
)
def test_xfail_fused_conv_bn2d_builtin_batch_norm_backward_layouts(case, training):
    _bn_backward_layouts_check(case, "builtin", training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", BN_BACKWARD_CASES)
def test_fused_conv_bn2d_custom_is_right_where_batch_norm_backward_is_not(case, training):
    """Output, gradients and running stats (updated in the caller's strided tensors) equal the
    contiguous-layout ones: training hands aten's batch-norm backward layouts it reads right,
    eval folds the batch norm into the conv."""
    _bn_backward_layouts_check(case, "custom", training)


def _strided_weight_case():
    g = torch.Generator().manual_seed(0)
    dtype = torch.float64
    x = torch.randn(1, 3, 3, 2, generator=g, dtype=dtype).permute(0, 3, 1, 2)  # channels_last
    leaf = torch.randn(1, 2, 2, 1, generator=g, dtype=dtype, requires_grad=True)
    return x, leaf, leaf.permute(0, 2, 1, 3)  # weight (1, 2, 2, 1), strides (4, 1, 2, 1)


def _strided_weight_twin_check():
    x, leaf, weight = _strided_weight_case()
    torch.autograd.grad(F.conv2d(x, weight).sum(), leaf)


_STRIDED_WEIGHT_XFAIL = pytest.mark.xfail(
    _upstream_bug(_strided_weight_twin_check),
    strict=True,
    raises=RuntimeError,
    reason=(
        "impl='builtin''s backward (F.conv2d's: upstream aten CPU) raises 'slow_conv2d: "
        "grad_weight must be contiguous' for a channels_last x and a conv weight that is "
        "channels_last-contiguous with a non-canonical stride on a size-1 dim; the custom op "
        "hands the kernel a weight with canonical strides"
    ),
)


@pytest.mark.parametrize(
    "training, impl",
    [
        pytest.param(True, "custom"),
        pytest.param(True, "builtin", marks=_STRIDED_WEIGHT_XFAIL),
        pytest.param(False, "custom"),
        pytest.param(False, "builtin", marks=_STRIDED_WEIGHT_XFAIL),
    ],
    ids=["train-custom", "train-builtin", "eval-custom", "eval-builtin"],
)
def test_xfail_fused_conv_bn2d_backward_strided_weight(training, impl):
    x, leaf, weight = _strided_weight_case()
    grad_out = torch.randn(1, 1, 2, 3, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    results = []
    for layout in (lambda t: t, lambda t: t.contiguous()):
        stats = torch.zeros(1, dtype=x.dtype), torch.ones(1, dtype=x.dtype)
        out = fused_conv_bn2d(
            layout(x), layout(weight), None, None, *stats, training=training, impl=impl
        )
        results.append([out, *torch.autograd.grad(out, leaf, grad_out), *stats])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def _bf16_depthwise_case():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 6, 3, 3, generator=g).permute(0, 3, 1, 2)  # (3, 3, 6, 3) channels_last
    return x, torch.randn(6, 1, 3, 2, generator=g)


def _bf16_depthwise_twin_check():
    x, w = _bf16_depthwise_case()
    got = F.conv2d(x.bfloat16(), w.bfloat16(), None, (1, 2), 0, 1, 3).double()
    want = F.conv2d(x.double(), w.double(), None, (1, 2), 0, 1, 3)
    torch.testing.assert_close(got, want, rtol=0.05, atol=0.05)


@pytest.mark.xfail(
    _upstream_bug(_bf16_depthwise_twin_check),
    strict=True,
    raises=AssertionError,
    reason=(
        "silently wrong forward (upstream aten/oneDNN CPU bfloat16 conv, inherited by both "
        "impls): a grouped conv with 1 input and 2 output channels per group, stride (1, 2) and "
        "a channels_last input returns scrambled values (~100% relative error) in bfloat16, "
        "with 1 or 2 threads; float16/float32 are right"
    ),
)
@pytest.mark.parametrize("impl", ["custom", "builtin"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_xfail_fused_conv_bn2d_bf16_depthwise_multiplier(impl, training):
    x, w = _bf16_depthwise_case()

    def run(dtype, impl):
        stats = torch.zeros(6, dtype=dtype), torch.ones(6, dtype=dtype)
        return fused_conv_bn2d(
            x.to(dtype), w.to(dtype), None, None, *stats, training=training, stride=(1, 2),
            groups=3, impl=impl,
        )  # fmt: skip

    want = run(torch.float64, "builtin")
    torch.testing.assert_close(run(torch.bfloat16, impl).double(), want, rtol=0.05, atol=0.05)
    # (float32 gets it right: the same call agrees with float64)
