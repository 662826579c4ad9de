"""The fused conv-BN's low-memory backward pieces: the conv recompute and the conv backward over
batch slices, batch norm's backward written into the conv output, each against aten's own
kernel; the op under slicing (gradcheck, gradgradcheck). The cnn step's peak they lower: tests/track/."""

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from models.ops import conv_bn_backward, fused_conv_bn2d
from models.ops.conv_bn_backward import (
    batch_norm_backward_into,
    batch_slices,
    conv_backward_in_slices,
    conv_in_slices,
)

pytestmark = pytest.mark.usefixtures("one_thread")
FORMATS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}


@pytest.fixture
def small_slices(monkeypatch):
    """Slices of 2 samples of the tensors below, so every path slices."""
    monkeypatch.setattr(conv_bn_backward, "ONE_CALL_BYTES", 2 * 3 * 6 * 6 * 8)
    monkeypatch.setattr(conv_bn_backward, "SLICE_BYTES", 2 * 3 * 6 * 6 * 8)


def test_batch_slices_cover_the_batch_in_slices_of_at_most_slice_bytes(small_slices):
    t = torch.zeros(7, 3, 6, 6, dtype=torch.float64)
    assert batch_slices(t) == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]
    assert batch_slices(t[:2]) == [slice(0, 2)]  # at most ONE_CALL_BYTES: one call
    assert batch_slices(t[:0]) == [slice(0, 0)]
    assert batch_slices(torch.zeros(3, 1000, 6, 6, dtype=torch.float64)) == [
        slice(0, 1), slice(1, 2), slice(2, 3)
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "conv",
    [((1, 1), (1, 1), (1, 1), False, (0, 0), 1), ((2, 1), (0, 2), (1, 2), False, (0, 0), 2)],
    ids=["3x3", "strided-dilated-groups"],
)  # torch.convolution's trailing arguments: stride, padding, dilation, ..., groups
def test_conv_in_slices_matches_one_call(fmt, conv, small_slices):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 4, 8, 8, generator=g, dtype=torch.float64)
    x = x.contiguous(memory_format=FORMATS[fmt])
    weight = torch.randn(6, 4 // conv[-1], 3, 3, generator=g, dtype=torch.float64)
    expected = torch.convolution(x, weight, None, *conv)
    assert len(batch_slices(expected)) > 1
    got = conv_in_slices(x, weight, conv)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert got.stride() == expected.stride()
    assert conv_in_slices(x[:1], weight, conv).shape == expected[:1].shape  # one call


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "noaffine"])
def test_batch_norm_backward_into_matches_aten(fmt, affine, small_slices):
    g = torch.Generator().manual_seed(0)
    y = (3 + 2 * torch.randn(7, 3, 6, 6, generator=g, dtype=torch.float64)).contiguous(
        memory_format=FORMATS[fmt]
    )
    grad_out = torch.randn(7, 3, 6, 6, generator=g, dtype=torch.float64)
    weight = torch.rand(3, generator=g, dtype=torch.float64) + 0.5 if affine else None
    _, mean, invstd = torch.native_batch_norm(y, weight, None, None, None, True, 0.1, 1e-5)
    expected = torch.ops.aten.native_batch_norm_backward(
        grad_out, y, weight, None, None, mean, invstd, True, 1e-5, [True, True, True]
    )
    buffer = y.clone()
    got = batch_norm_backward_into(buffer, grad_out, weight, mean, invstd)
    assert got[0] is buffer  # written in place
    for name, a, b in zip(("grad_y", "grad_weight", "grad_bias"), got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("need", [(True, True), (True, False), (False, True)])
def test_conv_backward_in_slices_matches_one_call(fmt, need, small_slices):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 4, 8, 8, generator=g, dtype=torch.float64)
    x = x.contiguous(memory_format=FORMATS[fmt])
    weight = torch.randn(6, 2, 3, 3, generator=g, dtype=torch.float64)
    conv = ((2, 1), (1, 1), (1, 1), False, (0, 0), 2)  # stride, padding, dilation, ..., groups
    grad_y = torch.randn_like(torch.convolution(x, weight, None, *conv))
    assert len(batch_slices(grad_y)) > 1
    got = conv_backward_in_slices(grad_y, x, weight, conv, *need)
    expected = torch.ops.aten.convolution_backward(
        grad_y, x, weight, None, *conv, [*need, False]
    )[:2]
    for wanted, a, b in zip(need, got, expected, strict=True):
        if not wanted:
            assert a is None
            continue
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        assert a.stride() == b.stride()


def test_fused_op_gradients_under_slicing(small_slices):
    """gradcheck and gradgradcheck of the op, with every backward piece running in slices."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(7, 3, 6, 6, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 3, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    gamma = (torch.rand(3, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    beta = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)

    def op(x, w, gamma, beta):
        return fused_conv_bn2d(x, w, gamma, beta, training=True, padding=1)

    assert gradcheck(op, (x, w, gamma, beta))
    assert gradgradcheck(op, (x, w, gamma, beta))
    out = op(x, w, gamma, beta)
    ref = F.batch_norm(F.conv2d(x, w, padding=1), None, None, gamma, beta, True)
    grads = torch.autograd.grad(out, (x, w, gamma, beta), out.cos())
    expected = torch.autograd.grad(ref, (x, w, gamma, beta), ref.cos())
    for a, b in zip(grads, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)

