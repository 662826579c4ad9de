"""LBFGS, Newton and Levenberg–Marquardt reach the exact poly3 optimum through legendre_p3."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import nn

from fitting.optim.levenberg_marquardt import LevenbergMarquardt
from fitting.optim.newton import Newton
from fitting.optim.options import lbfgs
from fitting.optim.second_order import residual_fn_from_model
from fitting.tasks.poly3_optimum import cubic_to_poly3, exact_poly3_optimum, poly3_data
from models.ops import legendre_p3
from models.poly3 import Poly3

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TUTORIAL_START = (0.0, -1.0, 0.0, 0.3)
MAX_ITERS = 50
REL_GAP = 1e-6
OPTIMIZERS = ("lbfgs", "newton", "lm")
IMPLS = ("custom", "builtin")


def residuals(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return model(x) - y


def make_optimizer(name: str, model: nn.Module, batch, **kwargs) -> torch.optim.Optimizer:
    if name == "lbfgs":
        # The app's LBFGS: one iteration per step() so iterations are counted like Newton's and
        # LM's; zero tolerances: the iteration budget, not LBFGS, decides when to stop.
        return lbfgs.build(lbfgs.LBFGSConfig(), model, None)
    cls = {"newton": Newton, "lm": LevenbergMarquardt}[name]
    return cls(model.parameters(), residual_fn_from_model(model, residuals, batch), **kwargs)


def sse_closure(model, optimizer, batch):
    def closure():
        optimizer.zero_grad()
        loss = residuals(model, batch).square().sum()
        loss.backward()
        return loss

    return closure


@functools.cache
def fit(name: str, impl: str, dtype: torch.dtype, start=TUTORIAL_START):
    """Run MAX_ITERS steps; (losses after each step, final ‖∇F‖, final parameters)."""
    batch = poly3_data(dtype)
    model = Poly3(*start, impl=impl, dtype=dtype)
    optimizer = make_optimizer(name, model, batch)
    closure = sse_closure(model, optimizer, batch)
    losses = []
    for _ in range(MAX_ITERS):
        optimizer.step(closure)
        with torch.no_grad():
            losses.append(float(residuals(model, batch).square().sum()))
    closure()
    grad_norm = float(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm())
    params = torch.stack([p.detach() for p in model.parameters()]).double()
    return losses, grad_norm, params


def test_exact_optimum_matches_scipy_curve_fit():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    import numpy as np

    best = exact_poly3_optimum()
    x, y = (t.numpy() for t in poly3_data(torch.float64))

    def model(x, a, b, c, d):
        u = c + d * x
        return a + b * 0.5 * (5 * u**3 - 3 * u)

    # 'trf' with tight tolerances; the default MINPACK 'lm' (finite-difference Jacobian)
    # stops 5e-10 relative above the optimum.
    p, _ = scipy_optimize.curve_fit(
        model, x, y, p0=TUTORIAL_START, method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15
    )
    scipy_loss = float(np.sum((model(x, *p) - y) ** 2))
    assert best.loss == pytest.approx(scipy_loss, rel=1e-12)
    assert best.loss <= scipy_loss * (1 + 1e-14)  # the closed form is the global minimum
    assert [best.a, best.b, best.c, best.d] == pytest.approx(list(p), rel=1e-9, abs=1e-11)
    assert best.loss == pytest.approx(8.817165410007, rel=1e-12)


def test_cubic_to_poly3_inverts_the_expansion():
    a, b, c, d = 0.3, -1.7, 0.2, 0.9
    cubic = (
        a + b * (2.5 * c**3 - 1.5 * c),
        b * d * (7.5 * c**2 - 1.5),
        7.5 * b * c * d**2,
        2.5 * b * d**3,
    )
    assert cubic_to_poly3(*cubic) == pytest.approx((a, b, c, d), rel=1e-12)
    with pytest.raises(ValueError, match="not of the form"):
        cubic_to_poly3(0.0, 1.0, 0.0, 1.0)  # p2² ≤ 3·p1·p3


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_reaches_the_optimum_in_float64(name, impl):
    best = exact_poly3_optimum(torch.float64).loss
    losses, grad_norm, params = fit(name, impl, torch.float64)
    gaps = [(loss - best) / best for loss in losses]
    reached = next(i + 1 for i, gap in enumerate(gaps) if gap <= REL_GAP)
    assert reached <= MAX_ITERS
    assert max(gaps[reached - 1 :]) <= REL_GAP  # and stays there
    assert min(gaps) >= -1e-13  # nothing beats the global minimum
    # ‖∇F‖ was 6.8e3 at the start; measured ≤ 1e-9 at the end for all three.
    assert grad_norm <= 1e-6
    optimum = exact_poly3_optimum(torch.float64)
    expected = torch.tensor([optimum.a, optimum.b, optimum.c, optimum.d], dtype=torch.float64)
    torch.testing.assert_close(params, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_custom_and_builtin_impls_follow_the_same_path(name):
    custom, builtin = fit(name, "custom", torch.float64), fit(name, "builtin", torch.float64)
    assert custom[0] == pytest.approx(builtin[0], rel=1e-10)
    torch.testing.assert_close(custom[2], builtin[2], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_float32_floor(name, impl):
    # float32 has its own optimum (its grid and sin values are rounded); what is left is the
    # rounding of Σr² itself: 2000 terms summed in float32 resolve ~1 ulp (1.2e-7) relative,
    # measured |gap| ≈ 3e-8. The gradient is a sum of 2000 terms of size ~10 in float32:
    # eps·√2000·10 ≈ 5e-5 .. eps·2000·10 ≈ 2e-3; measured ‖∇F‖ ≈ 4–5e-4 for all three.
    best = exact_poly3_optimum(torch.float32).loss
    losses, grad_norm, params = fit(name, impl, torch.float32)
    reached = next(i + 1 for i, loss in enumerate(losses) if abs(loss - best) / best <= REL_GAP)
    assert reached <= MAX_ITERS
    assert max(abs(loss - best) / best for loss in losses[reached - 1 :]) <= REL_GAP
    assert grad_norm <= 1e-2
    optimum = exact_poly3_optimum(torch.float32)
    expected = torch.tensor([optimum.a, optimum.b, optimum.c, optimum.d], dtype=torch.float64)
    torch.testing.assert_close(params, expected, rtol=1e-5, atol=1e-6)


def test_newton_damps_an_indefinite_hessian_and_still_converges():
    # ∇²F has an eigenvalue ≈ −6.9e3 here. (From b of the wrong sign, e.g. b = +1, Newton
    # follows the valley b → 0⁺, d → ∞ towards loss ≈ 800 instead; LM jumps out of it.)
    start = (0.0, -1.0, 0.0, 0.4)
    batch = poly3_data(torch.float64)
    model = Poly3(*start, dtype=torch.float64)
    optimizer = make_optimizer("newton", model, batch)
    optimizer.step()
    assert optimizer.last_stats["damping"] > 0
    assert optimizer.last_stats["new_loss"] < optimizer.last_stats["loss"]
    losses, grad_norm, _ = fit("newton", "custom", torch.float64, start)
    assert losses[-1] == pytest.approx(exact_poly3_optimum().loss, rel=1e-12)
    assert grad_norm <= 1e-6


@pytest.mark.parametrize("name", ("newton", "lm"))
def test_step_follows_the_optimizer_contract(name):
    batch = poly3_data(torch.float64)
    model = Poly3(dtype=torch.float64)
    optimizer = make_optimizer(name, model, batch, reduction="mean")
    closure_losses = []

    def closure():
        optimizer.zero_grad()
        loss = residuals(model, batch).square().mean()
        loss.backward()
        closure_losses.append(loss.detach())
        return loss

    with torch.no_grad():
        before = float(residuals(model, batch).square().mean())
    returned = optimizer.step(closure)
    assert returned is not None and float(returned.detach()) == pytest.approx(before)
    assert model.d.grad is not None  # the closure ran: the loop can log .grad as usual
    stats = optimizer.last_stats
    assert {"loss", "new_loss", "grad_norm", "damping", "rel_step"} <= stats.keys()
    assert stats["loss"] == pytest.approx(before)
    # ‖∇F‖ of the mean loss equals the closure's gradient norm.
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert stats["grad_norm"] == pytest.approx(float(grad.norm()), rel=1e-9)
    assert stats["new_loss"] < stats["loss"]
    for _ in range(15):
        optimizer.step(closure)
    assert float(closure_losses[-1]) == pytest.approx(exact_poly3_optimum().loss / 2000, rel=1e-9)
    assert "damping" in optimizer.state_dict()["state"][0]


@pytest.mark.parametrize(("cls", "limit"), ((Newton, 1000), (LevenbergMarquardt, 1000)))
def test_refuses_a_model_with_too_many_parameters(cls, limit):
    model = nn.Linear(100, 60)  # 6060 parameters

    def must_not_run(params):
        raise AssertionError("residual_fn must not be called before the size check")

    with pytest.raises(ValueError) as info:
        cls(model.parameters(), residual_fn=must_not_run)
    message = str(info.value)
    assert f"optimizer={cls.name}" in message
    assert "6060 parameters" in message and f"max_params={limit}" in message
    assert "lbfgs" in message


def test_lm_refuses_a_jacobian_too_large_for_memory():
    batch = poly3_data(torch.float64)
    model = Poly3(dtype=torch.float64)
    optimizer = make_optimizer("lm", model, batch, max_jacobian_numel=1000)
    with pytest.raises(ValueError, match=r"2000×4 Jacobian .*max_jacobian_numel=1000"):
        optimizer.step()


def _p3_eager(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (5 * x**3 - 3 * x)


def _poly3_loss(p3):
    x, y = poly3_data(torch.float64)

    def loss(theta: torch.Tensor) -> torch.Tensor:
        return (theta[0] + theta[1] * p3(theta[2] + theta[3] * x) - y).square().sum()

    return loss


def test_jacfwd_through_legendre_p3_equals_the_eager_expression():
    x = torch.linspace(-1.3, 1.1, 9, dtype=torch.float64)
    jac = torch.func.jacfwd(legendre_p3)(x)
    torch.testing.assert_close(jac, torch.func.jacfwd(_p3_eager)(x), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(jac, torch.diag(7.5 * x**2 - 1.5), rtol=1e-13, atol=1e-13)
    x_data, y = poly3_data(torch.float64)
    theta = torch.tensor([0.1, -1.0, 0.2, 0.3], dtype=torch.float64)

    def residual(p3):
        return lambda t: t[0] + t[1] * p3(t[2] + t[3] * x_data) - y

    torch.testing.assert_close(
        torch.func.jacfwd(residual(legendre_p3))(theta),
        torch.func.jacfwd(residual(_p3_eager))(theta),
        rtol=1e-12,
        atol=1e-12,
    )


def test_hessian_through_legendre_p3_equals_the_eager_expression():
    x = torch.linspace(-1.3, 1.1, 9, dtype=torch.float64)
    hess = torch.func.hessian(lambda t: legendre_p3(t).sum())(x)
    torch.testing.assert_close(hess, torch.diag(15 * x), rtol=1e-13, atol=1e-13)
    theta = torch.tensor([0.1, -1.0, 0.2, 0.3], dtype=torch.float64)
    expected = torch.func.hessian(_poly3_loss(_p3_eager))(theta)
    custom = _poly3_loss(legendre_p3)
    # Forward-over-reverse (torch.func.hessian) and reverse-over-reverse (double backward).
    for got in (
        torch.func.hessian(custom)(theta),
        torch.func.jacrev(torch.func.grad(custom))(theta),
        torch.autograd.functional.hessian(custom, theta),
    ):
        torch.testing.assert_close(got, expected, rtol=1e-11, atol=1e-9)


def test_exact_optimum_of_float32_data_differs_by_rounding_only():
    f64, f32 = exact_poly3_optimum(torch.float64), exact_poly3_optimum(torch.float32)
    assert f32.loss == pytest.approx(f64.loss, rel=1e-6)
    assert f32.d == pytest.approx(f64.d, rel=1e-6) and f32.d > 0
    assert math.isclose(f32.loss, f64.loss, rel_tol=1e-9) is False  # rounding shows: 2.4e-7
