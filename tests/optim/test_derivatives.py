"""derivatives.hessian and .jacobian equal torch.autograd.functional's, through ops with and
without a jvp (the tutorial's forward(ctx, ...) Function has none)."""

from __future__ import annotations

import pytest
import torch

from fitting.optim.derivatives import hessian, jacobian
from models.mlp import MLP
from models.ops import legendre_p3, legendre_p3_reference
from tests.optim.tutorial import LegendrePolynomial3

OPS = [legendre_p3, legendre_p3_reference,
       pytest.param(LegendrePolynomial3.apply, id="tutorial-LegendrePolynomial3")]


def small_mlp(activation) -> tuple[torch.nn.Module, dict[str, torch.Tensor], torch.Tensor]:
    torch.manual_seed(0)
    model = MLP(2, [3], 2, activation=activation, dtype=torch.float64)
    x = torch.randn(5, 2, dtype=torch.float64)
    return model, dict(model.named_parameters()), x


@pytest.mark.parametrize("p3", OPS)
def test_hessian_is_torchs(p3):
    a = torch.tensor([0.3, -1.2, 0.5], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    x = torch.linspace(-1, 1, 7, dtype=torch.float64)

    def loss(a, b):
        return (b * p3(a[0] + a[1] * x) + a[2] * x).square().sum()

    expected = torch.autograd.functional.hessian(loss, (a, b))
    expected = torch.cat([torch.cat([expected[i][j].reshape(a.numel() if i == 0 else 1, -1)
                                     for j in range(2)], dim=1) for i in range(2)])
    torch.testing.assert_close(hessian(lambda: loss(a, b), [a, b]), expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("p3", OPS)
def test_jacobian_is_torchs(p3):
    model, params, x = small_mlp(lambda z: p3(z))
    names = list(params)

    def residuals(values):
        return torch.func.functional_call(model, values, (x,)) - 1.0

    def of_tensors(*tensors):
        return residuals(dict(zip(names, tensors, strict=True))).reshape(-1)

    columns = torch.autograd.functional.jacobian(of_tensors, tuple(params.values()))
    expected = torch.cat([c.reshape(10, -1) for c in columns], dim=1)
    torch.testing.assert_close(jacobian(residuals, params), expected, rtol=1e-12, atol=1e-15)


def test_a_parameter_the_output_ignores_has_zero_derivatives():
    w, unused = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(hessian(lambda: (w * x).sum() ** 2, [w, unused])[2:], torch.zeros(3, 5))
    for p3 in (legendre_p3, LegendrePolynomial3.apply):  # forward AD, double vjp
        jac = jacobian(lambda v, p3=p3: p3(v["w"] * x), {"w": w, "unused": unused})
        assert jac.shape == (2, 5) and torch.equal(jac[:, 2:], torch.zeros(2, 3))
