"""Every op on inputs, parameters and incoming gradients in odd memory layouts (channels_last,
strided, transposed, expanded), float32 and float64, equals its twin on dense copies: outputs,
the gradient of every input that requires grad, and (conv-BN) the running statistics, in
training and eval, with and without affine parameters and running statistics.

The twin runs on dense copies because torch's CPU batch norm is itself wrong on some of these
layouts: F.batch_norm's backward reads a strided bn_weight as if contiguous when its input is
channels_last, so conv_bn_reference on the odd layouts gives gradients off by O(1) there.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, example, given
from hypothesis import strategies as st

from models.ops import (
    conv_bn_reference,
    fused_conv_bn2d,
    legendre_p3,
    legendre_p3_reference,
    linear,
    relu,
    relu_masked,
)
from tests.ops.layouts import DTYPES, PROPERTY, assert_all_close, grads, layouts, odd

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: threads only add sync

ELEMENTWISE = {"relu": (relu, torch.relu), "relu_masked": (relu_masked, torch.relu),
               "legendre_p3": (legendre_p3, legendre_p3_reference)}
SHAPES = st.lists(st.integers(0, 4), max_size=4).map(tuple)


def _randn(g: torch.Generator, dtype: torch.dtype):
    return lambda *shape: torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@PROPERTY
@given(shape=SHAPES, dtype=DTYPES, kinds=layouts(2), seed=st.integers(0, 2**16))
def test_elementwise_ops_equal_their_twins_in_any_layout(name, shape, dtype, kinds, seed):
    ours, twin = ELEMENTWISE[name]
    randn = _randn(torch.Generator().manual_seed(seed), dtype)
    leaf, x = odd(randn(*shape), kinds[0], requires_grad=True)
    out = ours(x)
    _, grad_out = odd(randn(*out.shape), kinds[1])
    want = twin(x.contiguous())
    assert_all_close([out, *grads(out, [leaf], grad_out)],
                     [want, *grads(want, [leaf], grad_out.contiguous())], ["out", "x"], dtype)


@PROPERTY
@given(lead=st.lists(st.integers(0, 3), max_size=2), n_in=st.integers(1, 4),
       n_out=st.integers(1, 4), bias=st.booleans(), dtype=DTYPES, kinds=layouts(4),
       needs=st.tuples(*[st.booleans()] * 3), seed=st.integers(0, 2**16))
def test_linear_equals_f_linear_in_any_layout(lead, n_in, n_out, bias, dtype, kinds, needs,
                                              seed):
    randn = _randn(torch.Generator().manual_seed(seed), dtype)
    shapes = [(*lead, n_in), (n_out, n_in), (n_out,)][: 3 if bias else 2]
    pairs = [odd(randn(*s), k, r) for s, k, r in zip(shapes, kinds, needs, strict=False)]
    leaves, args = [p[0] for p in pairs], [p[1] for p in pairs]
    out = linear(*args)
    _, grad_out = odd(randn(*out.shape), kinds[3])
    want = F.linear(*(a.contiguous() for a in args))
    assert_all_close([out, *grads(out, leaves, grad_out)],
                     [want, *grads(want, leaves, grad_out.contiguous())],
                     ["out", "x", "weight", "bias"], dtype)


@st.composite
def conv_bn_cases(draw):
    """(shapes of x, weight and the per-channel tensors, conv options, training, which of
    bn_weight/bn_bias and running stats exist) for a call both impls accept."""
    groups = draw(st.integers(1, 2))
    c_in, c_out = (groups * draw(st.integers(1, 3)) for _ in range(2))
    k, hw = draw(st.tuples(st.integers(1, 3), st.integers(1, 3))), draw(
        st.tuples(st.integers(1, 5), st.integers(1, 5)))
    conv = {"stride": draw(st.integers(1, 2)), "padding": draw(st.integers(0, 1)),
            "dilation": draw(st.integers(1, 2)), "groups": groups}
    n, training = draw(st.integers(1, 3)), draw(st.booleans())
    out_hw = [(s + 2 * conv["padding"] - conv["dilation"] * (kk - 1) - 1) // conv["stride"] + 1
              for s, kk in zip(hw, k, strict=True)]
    assume(min(out_hw) >= 1 and (not training or n * out_hw[0] * out_hw[1] > 1))
    affine, stats = draw(st.booleans()), draw(st.booleans()) or not training
    return (n, c_in, *hw), (c_out, c_in // groups, *k), c_out, conv, training, affine, stats


def _conv(groups=1):
    return {"stride": 1, "padding": 0, "dilation": 1, "groups": groups}


C, S, T = "contiguous", "strided", "transposed"
# Inputs the search found wrong (each once failed): (case as conv_bn_cases draws it, kinds of
# x, weight, bn_weight, bn_bias, running_mean, running_var, grad_out, which leaves need grad).
FOUND = [
    # eval, channels_last x, strided bn_weight: grad_x and grad_w off by O(1)
    (((2, 3, 5, 5), (4, 3, 3, 3), 4, _conv(), False, True, True),
     ("channels_last", C, S, C, C, C, "channels_last"), (True,) * 4),
    # eval, a 1x1 output (channels_last as well as contiguous), strided running_var
    (((1, 1, 1, 1), (2, 1, 1, 1), 2, _conv(), False, False, True),
     (C, C, C, C, C, S, C), (False, True, False, False)),
    # an NCHW output and a channels_last grad_out, in eval and in training
    (((1, 1, 1, 2), (2, 1, 1, 1), 2, _conv(), False, False, True),
     (C, C, C, C, C, C, T), (False, True, False, False)),
    (((1, 1, 1, 2), (2, 1, 1, 1), 2, _conv(), True, False, False),
     (C, C, C, C, C, C, T), (False, True, False, False)),
    # eval, a channels_last weight with odd strides on its size-1 dims: the conv refused it
    (((1, 2, 2, 1), (1, 2, 2, 1), 1, _conv(), False, False, True),
     ("channels_last", T, C, C, C, C, C), (False, True, False, False)),
    # a grouped conv of an x with odd strides on size-1 dims and a channels_last weight
    (((1, 4, 1, 2), (2, 2, 1, 2), 2, _conv(2), False, False, True),
     (T, "channels_last", C, C, C, C, C), (False, True, False, False)),
]


def _found(test):
    for case, kinds, needs in FOUND:
        test = example(case=case, dtype=torch.float64, kinds=kinds, needs=needs, momentum=0.1,
                       seed=0)(test)
    return test


@PROPERTY
@_found
@given(case=conv_bn_cases(), dtype=DTYPES, kinds=layouts(7),
       needs=st.tuples(*[st.booleans()] * 4), momentum=st.sampled_from([0.1, 0.0, 1.0]),
       seed=st.integers(0, 2**16))
def test_fused_conv_bn2d_equals_the_twin_in_any_layout(case, dtype, kinds, needs, momentum,
                                                       seed):
    x_shape, w_shape, c, conv, training, affine, has_stats = case
    randn = _randn(torch.Generator().manual_seed(seed), dtype)
    pairs = [odd(randn(*x_shape), kinds[0], needs[0]), odd(randn(*w_shape), kinds[1], needs[1])]
    if affine:
        pairs += [odd(randn(c), kinds[2], needs[2]), odd(randn(c), kinds[3], needs[3])]
    leaves, args = [p[0] for p in pairs], [p[1] for p in pairs] + [None] * (2 - affine * 2)
    # Running stats are written in place: strided ones, never expanded.
    stat_kinds = [k if k != "expanded" else "strided" for k in kinds[4:6]]
    stats = [odd(t, k)[1] for t, k in zip((randn(c), randn(c).abs() + 0.5), stat_kinds,
                                          strict=True)] if has_stats else [None, None]
    dense_stats = [s if s is None else s.clone() for s in stats]
    out = fused_conv_bn2d(*args, *stats, training, momentum, 1e-5, **conv)
    _, grad_out = odd(randn(*out.shape), kinds[6])
    want = conv_bn_reference(*(a if a is None else a.contiguous() for a in args), *dense_stats,
                             training, momentum, 1e-5, **conv)
    got = [out, *grads(out, leaves, grad_out), *(s for s in stats if s is not None)]
    want = [want, *grads(want, leaves, grad_out.contiguous()),
            *(s for s in dense_stats if s is not None)]
    names = ["out", *(n for n, r in zip(("x", "w", "bn_w", "bn_b"), needs, strict=False)
                      if r), "running_mean", "running_var"]
    assert_all_close(got, want, names, dtype)
