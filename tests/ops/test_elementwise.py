"""legendre_p3, relu and relu_masked against their twins: values, gradients, double backward,
forward AD and vmap, on edge values and random floats (micrograd's test, op by op)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ops import legendre_p3, legendre_p3_reference, relu, relu_masked
from tests.ops.helpers import DEVICES, EDGES, INF, NAN, grads

PAIRS = [(legendre_p3, legendre_p3_reference), (relu, torch.relu), (relu_masked, torch.relu)]
IDS = ["legendre_p3", "relu", "relu_masked"]
FLOATS = st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=8)


def _both(ours, twin, x, grad_out, **kw):
    """(output, input gradient) of ours and of the twin on copies of x."""
    results = []
    for fn in (ours, twin):
        xi = x.detach().clone().requires_grad_()
        out = fn(xi)
        results.append((out, *grads(out, xi, grad_out, **kw)))
    return results


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("ours", "twin"), PAIRS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_values_and_gradients_equal_the_twin_on_edge_values(ours, twin, dtype, device):
    x = torch.tensor(EDGES + [-2.0, -0.5, 0.5, 2.0], dtype=dtype, device=device)
    if ours is legendre_p3:
        # At ±inf the twin computes inf - inf = nan; x·(2.5x² − 1.5) gives the limit, ±inf.
        # So does its gradient where the twin's 3x²·grad hits 0·inf; compared on the rest.
        assert legendre_p3(x[2:4]).tolist() == [INF, -INF]
        x[2:4] = NAN
    grad_edges = [1.0, -2.0] if ours is legendre_p3 else [1.0, INF, NAN, -2.0]
    grad_out = torch.tensor((grad_edges * 7)[:13], dtype=dtype, device=device)
    (got, got_grad), (want, want_grad) = _both(ours, twin, x, grad_out)
    # legendre_p3 rounds differently (x·(2.5x² − 1.5) vs ½(5x³ − 3x)): close, and inf/nan alike.
    tol = {"rtol": 0, "atol": 0} if ours is not legendre_p3 else {}
    torch.testing.assert_close(got, want, equal_nan=True, **tol)
    torch.testing.assert_close(got_grad, want_grad, equal_nan=True, **tol)
    if ours is not legendre_p3:  # relu(-0.0) keeps torch.relu's sign
        assert torch.equal(got.signbit() & ~got.isnan(), want.signbit() & ~want.isnan())


@settings(max_examples=20, deadline=None)
@given(values=FLOATS)
@pytest.mark.parametrize(("ours", "twin"), PAIRS, ids=IDS)
def test_random_floats_match_the_twin(ours, twin, values):
    x = torch.tensor(values, dtype=torch.float64)
    grad_out = torch.linspace(-1, 1, len(values), dtype=torch.float64)
    (got, got_grad), (want, want_grad) = _both(ours, twin, x, grad_out)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


@pytest.mark.parametrize(("ours", "twin"), PAIRS, ids=IDS)
def test_double_backward_equals_the_twins(ours, twin):
    x = torch.tensor([-1.5, -0.3, 0.4, 2.0], dtype=torch.float64)
    grad_out = torch.tensor([0.5, -1.0, 2.0, 1.5], dtype=torch.float64, requires_grad=True)
    results = []
    for fn in (ours, twin):
        xi = x.clone().requires_grad_()
        (gx,) = grads(fn(xi), xi, grad_out, create_graph=True)
        results.append(grads(gx, (xi, grad_out), torch.ones_like(x)))
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fn", [p[0] for p in PAIRS], ids=IDS)
def test_gradcheck_and_gradgradcheck_in_float64(fn):
    # Away from relu's kink at 0, where finite differences are meaningless.
    x = torch.tensor([-1.5, -0.3, 0.4, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (x,), check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize(("ours", "twin"), PAIRS, ids=IDS)
def test_jvp_vmap_and_hessian_equal_the_twins(ours, twin):
    x = torch.tensor([[-1.5, 0.4], [2.0, -0.3]], dtype=torch.float64)
    t = torch.ones_like(x)
    for transform in (
        lambda f: torch.func.jvp(f, (x,), (t,)),
        lambda f: torch.func.vmap(f)(x),
        lambda f: torch.func.hessian(lambda v: f(v).sum())(x[0]),
        lambda f: torch.func.jacfwd(f)(x[0]),
    ):
        torch.testing.assert_close(transform(ours), transform(twin))
