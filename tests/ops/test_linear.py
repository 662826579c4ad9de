"""linear against torch.nn.functional.linear: values, gradients, double backward, forward AD,
vmap, gradcheck, and the bytes it saves (only what the requested gradients need)."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ops import linear, saved_tensor_bytes
from tests.ops.helpers import DEVICES, INF, NAN, grads

SHAPES = [((5, 3), True), ((3,), True), ((2, 4, 3), True), ((5, 3), False), ((0, 3), True)]


def _inputs(x_shape, bias, dtype=torch.float64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x, w, b = (torch.randn(*s, generator=g, dtype=dtype).to(device)
               for s in (x_shape, (4, x_shape[-1]), (4,)))
    return [t.requires_grad_() for t in (x, w, b if bias else None) if t is not None]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("x_shape", "bias"), SHAPES)
def test_values_and_gradients_equal_f_linear(x_shape, bias, device):
    args = _inputs(x_shape, bias, device=device)
    got, want = linear(*args), F.linear(*args)
    grad_out = torch.randn(got.shape, dtype=got.dtype, device=device)
    torch.testing.assert_close(got, want)
    for a, b in zip(grads(got, args, grad_out), grads(want, args, grad_out), strict=True):
        torch.testing.assert_close(a, b)


def test_non_finite_inputs_propagate_like_f_linear():
    x, w, b = _inputs((3, 3), True, torch.float32)
    with torch.no_grad():
        x[0, 0], x[1, 1], w[2, 2] = INF, NAN, -INF
    got, want = linear(x, w, b), F.linear(x, w, b)
    torch.testing.assert_close(got, want, equal_nan=True)
    grad_out = torch.ones_like(got)
    for g1, g2 in zip(grads(got, (x, w, b), grad_out), grads(want, (x, w, b), grad_out),
                      strict=True):
        torch.testing.assert_close(g1, g2, equal_nan=True)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 4), n_in=st.integers(1, 4), seed=st.integers(0, 99))
def test_random_sizes_match_f_linear(rows, n_in, seed):
    args = _inputs((rows, n_in), True, seed=seed)
    torch.testing.assert_close(linear(*args), F.linear(*args))


@pytest.mark.parametrize(("x_shape", "bias"), SHAPES[:4])
def test_gradcheck_gradgradcheck_and_forward_ad(x_shape, bias):
    args = _inputs(x_shape, bias)
    assert torch.autograd.gradcheck(linear, args, check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(linear, args)


def test_jacfwd_and_vmap_equal_f_linears():
    x, w, b = (t.detach() for t in _inputs((2, 3), True))
    for transform in (lambda f: torch.func.jacfwd(f, argnums=(0, 1, 2))(x, w, b),
                      lambda f: torch.func.vmap(f, in_dims=(0, None, None))(x, w, b)):
        torch.testing.assert_close(transform(linear), transform(F.linear))


def test_it_saves_only_what_the_requested_gradients_need():
    x, w, b = (t.detach() for t in _inputs((8, 3), True))
    for needs, want in (("x", w), ("w", x), ("xw", None)):
        xi, wi = x.requires_grad_("x" in needs), w.clone().requires_grad_("w" in needs)
        with saved_tensor_bytes() as saved:
            linear(xi, wi, b)
        expected = x.nbytes + w.nbytes if want is None else want.nbytes
        assert saved.bytes == expected, needs
