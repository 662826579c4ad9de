"""gradcheck / gradgradcheck / forward-AD checks of every op in float64 (micrograd-style)."""

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from models.ops import legendre_p3, linear, relu, relu_masked
from models.ops.exhibits import MulConstant, cube, mul_constant

SHAPES = [(7,), (3, 5), (2, 3, 4)]
UNARY = {
    "legendre_p3": legendre_p3,
    "relu": relu,
    "relu_masked": relu_masked,
    "cube": cube,
    "mul_constant": lambda x: mul_constant(x, -2.5),
}


def _input(shape, device, non_contiguous=False):
    if non_contiguous:
        # A transposed view: same values, strides that are not row-major.
        t = torch.randn(*reversed(shape), dtype=torch.float64, device=device).mT
        assert not t.is_contiguous() or t.dim() < 2
    else:
        t = torch.randn(*shape, dtype=torch.float64, device=device)
    # Keep relu's inputs away from its kink so finite differences are valid there.
    t = t + 0.1 * torch.sign(t)
    return t.requires_grad_()


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("non_contiguous", [False, True])
def test_unary_gradcheck_forward_ad_and_double_backward(name, shape, non_contiguous, device):
    fn = UNARY[name]
    x = _input(shape, device, non_contiguous and len(shape) >= 2)
    assert gradcheck(fn, (x,), check_forward_ad=True, check_batched_grad=True)
    assert gradgradcheck(fn, (x,), check_fwd_over_rev=True, check_batched_grad=True)


LINEAR_GRAD_CASES = [
    (with_bias, requires)
    for with_bias in (True, False)
    for requires in ("all", "x", "weight", "bias")
    if with_bias or requires != "bias"
]


@pytest.mark.parametrize("x_shape", [(4,), (5, 4), (2, 3, 4)])
@pytest.mark.parametrize(("with_bias", "requires"), LINEAR_GRAD_CASES)
def test_linear_gradcheck(x_shape, with_bias, requires, device):
    torch.manual_seed(0)
    kw = {"dtype": torch.float64, "device": device}
    x = torch.randn(*x_shape, **kw)
    w = torch.randn(4, 3, **kw).mT  # non-contiguous weight (3, 4)
    b = torch.randn(3, **kw) if with_bias else None
    wanted = {"x": x, "weight": w, "bias": b}
    for name, t in wanted.items():
        if t is not None and requires in ("all", name):
            t.requires_grad_()
    assert gradcheck(linear, (x, w, b), check_forward_ad=True, check_batched_grad=True)
    assert gradgradcheck(linear, (x, w, b), check_fwd_over_rev=True)


def test_linear_skips_gradients_nobody_needs():
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, dtype=torch.float64)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    linear(x, w, b).sum().backward()
    assert x.grad is not None and b.grad is not None and w.grad is None


def test_mul_constant_backward_handles_missing_gradient():
    # With set_materialize_grads(False) autograd may hand backward None instead of zeros;
    # backward must pass None on rather than fail or allocate a zero tensor.
    ctx = type("Ctx", (), {"constant": 3.0})()
    assert MulConstant.backward(ctx, None) == (None, None)
    x = torch.randn(4, requires_grad=True)
    (g,) = torch.autograd.grad(mul_constant(x, 3.0).sum(), x)
    assert torch.equal(g, torch.full((4,), 3.0))


def test_cube_double_backward_is_exact():
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(cube(x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(g, 3 * x.detach() ** 2)
    torch.testing.assert_close(gg, 6 * x.detach())


def test_legendre_p3_derivatives_are_exact():
    x = torch.linspace(-2, 2, 9, dtype=torch.float64, requires_grad=True)
    (d1,) = torch.autograd.grad(legendre_p3(x).sum(), x, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), x)
    torch.testing.assert_close(d1, 7.5 * x.detach() ** 2 - 1.5)
    torch.testing.assert_close(d2, 15 * x.detach())
