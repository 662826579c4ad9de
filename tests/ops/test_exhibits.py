"""The teaching exhibits, each against its twin: cube, mul_constant, legendre_p3_numpy (a
torch.library custom op), once_differentiable and ScalarTensor."""

import pytest
import torch

from models.ops import legendre_p3_reference
from models.ops.exhibits import (
    ScalarTensor,
    cube,
    legendre_p3_numpy,
    mul_constant,
    once_differentiable,
)

X = torch.tensor([-1.5, -0.3, 0.0, 0.4, 2.0], dtype=torch.float64)


def _derivatives(fn, x):
    """fn(x), its first and second derivative (elementwise) by autograd."""
    x = x.clone().requires_grad_()
    y = fn(x)
    (d1,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), x)
    return y, d1, d2


def test_cube_has_exact_first_and_second_derivatives():
    for got, want in zip(_derivatives(cube, X), _derivatives(lambda x: x**3, X), strict=True):
        torch.testing.assert_close(got, want)
    x = X.clone().requires_grad_()
    assert torch.autograd.gradgradcheck(cube, (x,))


def test_mul_constant_equals_x_times_c_and_c_gets_no_gradient():
    x = X.clone().requires_grad_()
    out = mul_constant(x, -2.5)
    torch.testing.assert_close(out, X * -2.5)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(X, -2.5))
    assert torch.autograd.gradcheck(lambda x: mul_constant(x, 3.0), (x,))


def test_legendre_p3_numpy_matches_the_reference_and_its_custom_ops_pass_opcheck():
    x = X.clone().requires_grad_()
    torch.testing.assert_close(legendre_p3_numpy(x), legendre_p3_reference(X))
    assert torch.autograd.gradcheck(legendre_p3_numpy, (x,))
    torch.library.opcheck(legendre_p3_numpy, (x,))
    torch.library.opcheck(torch.ops.curve_fitting_lab.legendre_p3_numpy_backward, (X, X))


def test_legendre_p3_numpy_refuses_a_double_backward():
    x = X.clone().requires_grad_()
    (g,) = torch.autograd.grad(legendre_p3_numpy(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="legendre_p3_numpy is once differentiable"):
        g.sum().backward()


def test_legendre_p3_numpy_compiles_as_one_opaque_node():
    compiled = torch.compile(legendre_p3_numpy, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(X), legendre_p3_reference(X))


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_once_differentiable_gives_the_gradient_and_refuses_every_double_backward():
    x = X.clone().requires_grad_()
    (g,) = torch.autograd.grad(_Square.apply(x).sum(), x, create_graph=True)
    torch.testing.assert_close(g, 2 * X)
    # A constant incoming gradient: only the saved input links g to x (torch's own decorator
    # misses this path and gives a silently wrong zero).
    with pytest.raises(RuntimeError, match="_Square.*once_differentiable"):
        g.sum().backward()
    grad_out = torch.ones_like(X, requires_grad=True)
    (g,) = torch.autograd.grad(_Square.apply(x), x, grad_out, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        torch.autograd.grad(g.sum(), grad_out)


def test_scalar_tensor_works_in_torch_functions_like_its_dense_tensor():
    s, t = ScalarTensor(3, 2.0), ScalarTensor(3, 0.5)
    assert torch.mean(s).item() == pytest.approx(torch.mean(s.tensor()).item())
    total = torch.add(s, t)
    assert isinstance(total, ScalarTensor) and torch.equal(total.tensor(), 2.5 * torch.eye(3))
    dense = torch.randn(3, 3)
    torch.testing.assert_close(torch.add(s, dense), s.tensor() + dense)
    torch.testing.assert_close(torch.mm(s, dense), 2.0 * dense)  # unhandled: dense fallback
    torch.testing.assert_close(torch.mean(s, dim=0), s.tensor().mean(dim=0))
    assert repr(s) == "ScalarTensor(N=3, value=2.0)"
