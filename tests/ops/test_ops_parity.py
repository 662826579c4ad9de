"""Each custom op against its built-in twin: same forward, same gradients (float32, float64)."""

import pytest
import torch

from models.ops import legendre_p3, linear, relu, relu_masked
from models.ops.exhibits import cube, mul_constant

UNARY = {
    "legendre_p3": legendre_p3,
    "relu": relu,
    "relu_masked": relu_masked,
    "cube": cube,
    "mul_constant": lambda x, impl: mul_constant(x, 0.7, impl),
}
TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def _forward_and_grads(fn, inputs, grad_out):
    leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = fn(*leaves)
    out.backward(grad_out)
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unary_matches_builtin(name, dtype, device):
    torch.manual_seed(0)
    x = torch.randn(64, 33, dtype=dtype, device=device)
    x[0, :5] = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 3.0])  # relu's edge cases
    x = x[:, ::2].requires_grad_()  # non-contiguous
    g = torch.randn(x.shape, dtype=dtype, device=device)
    fn = UNARY[name]
    out_c, (gx_c,) = _forward_and_grads(lambda t: fn(t, impl="custom"), [x], g)
    out_b, (gx_b,) = _forward_and_grads(lambda t: fn(t, impl="builtin"), [x], g)
    torch.testing.assert_close(out_c, out_b, **TOL[dtype])
    torch.testing.assert_close(gx_c, gx_b, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("x_shape", [(16,), (8, 16), (2, 5, 16)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_matches_builtin(dtype, x_shape, with_bias, device):
    torch.manual_seed(0)
    kw = {"dtype": dtype, "device": device}
    x = torch.randn(*x_shape, **kw).requires_grad_()
    w = torch.randn(12, 16, **kw).requires_grad_()
    b = torch.randn(12, **kw).requires_grad_() if with_bias else None
    inputs = [x, w] + ([b] if with_bias else [])
    g = torch.randn(*x_shape[:-1], 12, **kw)

    def run(impl):
        return lambda *t: linear(t[0], t[1], t[2] if len(t) > 2 else None, impl=impl)

    out_c, grads_c = _forward_and_grads(run("custom"), inputs, g)
    out_b, grads_b = _forward_and_grads(run("builtin"), inputs, g)
    torch.testing.assert_close(out_c, out_b, **TOL[dtype])
    for gc, gb in zip(grads_c, grads_b, strict=True):
        torch.testing.assert_close(gc, gb, **TOL[dtype])


@pytest.mark.parametrize("relu", [relu, relu_masked])
def test_relu_nan_and_signed_zero_follow_builtin(relu):
    x = torch.tensor([float("nan"), -0.0, 0.0, -1.0, 2.0], requires_grad=True)
    y = relu(x)
    y.backward(torch.ones(5))
    x2 = x.detach().clone().requires_grad_()
    torch.relu(x2).backward(torch.ones(5))
    torch.testing.assert_close(y, torch.relu(x2), equal_nan=True)
    torch.testing.assert_close(x.grad, x2.grad, equal_nan=True)
