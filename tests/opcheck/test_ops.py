"""fitting.slots: an op choice to its callable; fitting.precheck: the pre-check a run makes of a
user's op."""

import sys
import threading

import pytest
import torch

import fitting.optim.derivatives as derivatives
from docs.examples.tutorial_ops import LegendrePolynomial3, MyReLU
from fitting import slots, verdict
from fitting.opcheck import clash
from fitting.opcheck.cli import main
from fitting.precheck import OpRefused, precheck
from models.ops import legendre_p3_reference, relu
from tests.opcheck import user_ops


def test_each_choice_resolves_to_its_callable():
    assert slots.resolve("activation", "custom") is relu
    assert slots.resolve("legendre_p3", "builtin") is legendre_p3_reference
    assert slots.resolve("activation", "tests.opcheck.user_ops:where_relu") is user_ops.where_relu
    assert slots.resolve("activation", "docs.examples.tutorial_ops:MyReLU") == MyReLU.apply
    leaky = {"_target_": "torch.nn.functional.leaky_relu", "_partial_": True,
             "negative_slope": 0.1}
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(slots.resolve("activation", leaky)(x), torch.tensor([-0.1, 2.0]))
    assert slots.describe(leaky) == "torch.nn.functional.leaky_relu(negative_slope=0.1)"


@pytest.mark.parametrize(("choice", "says"), [
    ("relu", "ops.activation=relu: ValueError: expected custom, builtin, <module>:<name> or "),
    ("torch:no_such", "ops.activation=torch:no_such: AttributeError: module 'torch' has no"),
    ({"_target_": "no_such_mod.fn", "_partial_": True},
     "no_such_mod.fn(): ModuleNotFoundError: No module named 'no_such_mod'"),
    ({"_target_": "torch.nn.functional.leaky_relu"},
     "missing 1 required positional argument: 'input'; add _partial_: true"),
])
def test_a_choice_that_cannot_resolve_is_one_line_naming_the_key(choice, says):
    with pytest.raises((OpRefused, ValueError)) as err:
        slots.resolve("activation", choice)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("ops.activation=")
    assert says in str(err.value)


def test_a_users_models_py_that_clashes_is_named_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "models.py").write_text("def my_relu(x):\n    return x.clamp_min(0)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises((OpRefused, ValueError), match=f"your {tmp_path / 'models.py'} is hidden by "
                                                "the lab's package models; rename it"):
        slots.resolve("activation", "models:my_relu")
    # the card, run from that directory: Python finds the user's models.py first
    monkeypatch.delitem(sys.modules, "models")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert clash() == (f"error: your {tmp_path / 'models.py'} hides the lab's package 'models' "
                       "from the card; rename it (e.g. my_models.py) and name your op by the "
                       "new module")


def test_the_precheck_is_the_cards_training_row(capsys):
    with pytest.raises((OpRefused, ValueError)) as err:
        precheck("activation", user_ops.relu_one_at_zero, device="cpu", dtype=torch.float32)
    assert main(["activation", "tests.opcheck.user_ops:relu_one_at_zero", "--no-compile"]) == 1
    wrong = capsys.readouterr().out.splitlines()[1].split("wrong", 1)[1].strip()
    assert str(err.value).startswith(f"ops.activation: wrong for training: {wrong}")
    precheck("activation", MyReLU.apply, device="cpu", dtype=torch.float32)  # a note passes


def test_the_precheck_refuses_what_the_optimizer_needs_and_the_op_lacks():
    assert verdict.hessian is derivatives.hessian and verdict.jacobian is derivatives.jacobian
    with pytest.raises((OpRefused, ValueError), match="ops.activation: unsupported for second order: "
                       "its hessian .* optimizer=newton needs it"):
        precheck("activation", user_ops.ReLUOnce.apply, device="cpu", dtype=torch.float32,
                     uses=("training", "second_order"))
    precheck("legendre_p3", LegendrePolynomial3.apply, device="cpu", dtype=torch.float64,
                 uses=("training", "second_order", "forward_ad"))


def test_the_precheck_runs_in_the_callers_thread_and_settings():
    seen = []

    def spy(x):
        seen.append((threading.get_ident(), torch.get_num_threads(),
                     torch.are_deterministic_algorithms_enabled()))
        return torch.relu(x)

    precheck("activation", spy, device="cpu", dtype=torch.float32)
    caller = (threading.get_ident(), torch.get_num_threads(),
              torch.are_deterministic_algorithms_enabled())
    assert seen and set(seen) == {caller}


@pytest.mark.parametrize("fn", [torch.nn.functional.silu, torch.nn.functional.gelu, torch.tanh])
def test_any_activation_that_runs_and_differentiates_passes_the_precheck(fn):
    precheck("activation", fn, device="cpu", dtype=torch.float32)  # its own reference
