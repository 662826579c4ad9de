"""optimizer=gd: GradientDescent steps exactly as the tutorial's hand-written update."""

from __future__ import annotations

import math

import pytest
import torch

from fitting.optim.gradient_descent import GradientDescent
from models.poly3 import Poly3
from tests.helpers.tutorial import tutorial_fit

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("impl", ["custom", "builtin"])
def test_steps_round_as_the_tutorial(impl):
    """Bit for bit with the tutorial's `p -= lr * p.grad`, also for a and c, which stay near 0
    and so show every rounding difference."""
    model = Poly3(impl=impl)
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    optimizer = GradientDescent(model.parameters(), lr=5e-6)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = (model(x) - y).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(300):
        loss = optimizer.step(closure)
    expected = tutorial_fit(300, impl)
    got = {"loss": loss.item(), **{n: p.item() for n, p in model.named_parameters()}}
    assert got == expected
    assert expected["a"] != 0.0 and expected["c"] != 0.0  # the case that tells roundings apart


def test_state_dict_has_torch_optims_layout_and_round_trips():
    params = [torch.zeros(3, requires_grad=True), torch.zeros((), requires_grad=True)]
    state = GradientDescent(params, lr=0.5).state_dict()
    assert state == {"state": {}, "param_groups": [{"lr": 0.5, "params": [0, 1]}]}
    other = GradientDescent(params, lr=0.1)
    other.load_state_dict(state)
    assert other.param_groups[0]["lr"] == 0.5
    # A torch.optim.SGD checkpoint over the same parameters loads too (its lr is taken).
    other.load_state_dict(torch.optim.SGD(params, lr=0.25).state_dict())
    assert other.param_groups[0]["lr"] == 0.25


def test_load_refuses_a_state_dict_of_other_parameters():
    optimizer = GradientDescent([torch.zeros(2, requires_grad=True)], lr=0.1)
    three = GradientDescent([torch.zeros(1, requires_grad=True) for _ in range(3)], lr=0.1)
    with pytest.raises(ValueError, match=r"groups of sizes \[3\], this optimizer one group of 1"):
        optimizer.load_state_dict(three.state_dict())


def test_zero_grad_and_parameters_without_gradient():
    used, unused = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    optimizer = GradientDescent([used, unused], lr=0.5)
    (used * 2.0).sum().backward()
    optimizer.step()
    assert used.tolist() == [0.0, 0.0] and unused.tolist() == [1.0, 1.0]
    optimizer.zero_grad(set_to_none=False)
    assert used.grad.tolist() == [0.0, 0.0]
    optimizer.zero_grad()
    assert used.grad is None


@pytest.mark.parametrize(
    ("params", "lr", "message"),
    [
        ([], 0.1, "got an empty parameter list"),
        ([torch.zeros(1, requires_grad=True)], 0.0, "lr must be > 0, got 0.0"),
        ([torch.zeros(1, requires_grad=True)], math.nan, "lr must be > 0, got nan"),
    ],
)
def test_refuses_bad_arguments(params, lr, message):
    with pytest.raises(ValueError, match=message):
        GradientDescent(params, lr=lr)
