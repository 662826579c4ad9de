"""torch.func transforms through the custom ops equal those through the built-in twins."""

import pytest
import torch
from torch.func import hessian, jacfwd, jacrev, vmap

from models.ops import legendre_p3, linear, relu, relu_masked
from models.ops.exhibits import cube

OPS = {"legendre_p3": legendre_p3, "relu": relu, "relu_masked": relu_masked, "cube": cube}


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("transform", [vmap, jacfwd, jacrev])
def test_first_order_transforms_match_builtin(name, transform, device):
    op = OPS[name]
    x = torch.randn(5, 4, dtype=torch.float64, device=device)
    got = transform(lambda t: op(t, impl="custom"))(x)
    want = transform(lambda t: op(t, impl="builtin"))(x)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["legendre_p3", "cube"])
def test_hessian_matches_builtin(name, device):
    op = OPS[name]
    x = torch.randn(6, dtype=torch.float64, device=device)
    got = hessian(lambda t: op(t, impl="custom").sum())(x)
    want = hessian(lambda t: op(t, impl="builtin").sum())(x)
    torch.testing.assert_close(got, want)


def test_poly3_model_hessian_and_jacfwd_match_builtin():
    x = torch.linspace(-3, 3, 50, dtype=torch.float64)
    y = torch.sin(x)
    params = torch.tensor([0.1, -1.0, 0.2, 0.3], dtype=torch.float64)

    def residuals(p, impl):
        a, b, c, d = p
        return a + b * legendre_p3(c + d * x, impl=impl) - y

    def loss(p, impl):
        return residuals(p, impl).pow(2).sum()

    torch.testing.assert_close(
        jacfwd(residuals)(params, "custom"), jacfwd(residuals)(params, "builtin")
    )
    torch.testing.assert_close(hessian(loss)(params, "custom"), hessian(loss)(params, "builtin"))


def test_linear_jacfwd_and_vmap_match_builtin():
    x = torch.randn(3, 4, dtype=torch.float64)
    w = torch.randn(2, 4, dtype=torch.float64)
    b = torch.randn(2, dtype=torch.float64)
    for argnums in (0, 1, 2):
        got = jacfwd(lambda *a: linear(*a, impl="custom"), argnums=argnums)(x, w, b)
        want = jacfwd(lambda *a: linear(*a, impl="builtin"), argnums=argnums)(x, w, b)
        torch.testing.assert_close(got, want)
    got = vmap(lambda xi: linear(xi, w, b))(x)
    torch.testing.assert_close(got, x @ w.T + b)
