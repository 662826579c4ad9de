"""GradientDescent applies torch.optim.SGD's update bit for bit, without importing dynamo."""

import subprocess
import sys

import pytest
import torch

from fitting.optim.gradient_descent import GradientDescent

CONFIGS = [
    {"lr": 5e-6},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.1, "momentum": 0.9, "dampening": 0.5},
    {"lr": 0.05, "momentum": 0.8, "nesterov": True},
    {"lr": 0.1, "weight_decay": 0.01, "momentum": 0.5},
]


def _train(make_optimizer, steps=5):
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 3, dtype=torch.float64))
    b = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
    unused = torch.nn.Parameter(torch.randn(2, dtype=torch.float64))  # never gets a grad
    x = torch.randn(8, 3, dtype=torch.float64)
    opt = make_optimizer([w, b, unused])
    losses = []

    def closure():
        opt.zero_grad()
        loss = ((x @ w.T + b).sin() ** 2).sum()
        loss.backward()
        return loss

    for _ in range(steps):
        losses.append(opt.step(closure).item())
    return losses, [w.detach().clone(), b.detach().clone(), unused.detach().clone()], opt


@pytest.mark.parametrize("config", CONFIGS)
def test_bit_identical_to_torch_sgd(config):
    ours = _train(lambda p: GradientDescent(p, **config))
    ref = _train(lambda p: torch.optim.SGD(p, **config))
    assert ours[0] == ref[0]
    for a, b in zip(ours[1], ref[1], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("config", CONFIGS[1:])
def test_state_dict_round_trips_with_torch_sgd(config):
    _, _, ours = _train(lambda p: GradientDescent(p, **config), steps=3)
    _, _, ref = _train(lambda p: torch.optim.SGD(p, **config), steps=3)
    mine, theirs = ours.state_dict(), ref.state_dict()
    assert mine["param_groups"][0]["params"] == theirs["param_groups"][0]["params"]
    for i, s in theirs["state"].items():
        assert torch.equal(mine["state"][i]["momentum_buffer"], s["momentum_buffer"])
    # Ours loads torch's state and continues identically.
    p = [torch.nn.Parameter(torch.zeros(4, 3, dtype=torch.float64)) for _ in range(3)]
    fresh = GradientDescent(p, lr=1.0)
    fresh.load_state_dict(theirs)
    assert fresh.param_groups[0]["momentum"] == config["momentum"]


def test_bad_arguments_are_named():
    p = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(ValueError, match="GradientDescent: lr must be > 0, got 0"):
        GradientDescent(p, lr=0)
    with pytest.raises(ValueError, match="nesterov needs momentum > 0"):
        GradientDescent(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="state_dict is for 2 parameters in 1 group"):
        GradientDescent(p, lr=0.1).load_state_dict(
            {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}
        )


def test_does_not_import_dynamo():
    code = (
        "import sys, torch\n"
        "from fitting.optim.gradient_descent import GradientDescent\n"
        "p = torch.nn.Parameter(torch.ones(3))\n"
        "opt = GradientDescent([p], lr=0.1, momentum=0.9)\n"
        "def closure():\n"
        "    opt.zero_grad(); loss = (p ** 2).sum(); loss.backward(); return loss\n"
        "opt.step(closure); opt.step(closure); opt.state_dict()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
