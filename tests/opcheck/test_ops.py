"""fitting.opcheck.boundary: an op choice to its callable; fitting.opcheck.precheck: the pre-check
a run makes of a user's op."""

import shlex
import sys
import threading

import pytest
import torch

import fitting.opcheck.uses as uses_
import fitting.optim.derivatives as derivatives
from docs.examples.tutorial_ops import LegendrePolynomial3, MyReLU
from fitting import slots
from fitting.opcheck import clash, cli
from fitting.opcheck.boundary import resolve
from fitting.opcheck.cli import main
from fitting.opcheck.precheck import OpRefused, command, precheck
from fitting.opcheck.uses import NAMES
from models.ops import legendre_p3_reference, relu
from tests.opcheck import user_ops

U, EX = "tests.opcheck.user_ops:", "docs.examples."


def test_each_choice_resolves_to_its_callable():
    assert resolve("activation", "custom") is relu
    assert resolve("legendre_p3", "builtin") is legendre_p3_reference
    assert resolve("activation", "tests.opcheck.user_ops:where_relu") is user_ops.where_relu
    assert resolve("activation", "docs.examples.tutorial_ops:MyReLU") == MyReLU.apply
    leaky = {"_target_": "torch.nn.functional.leaky_relu", "_partial_": True,
             "negative_slope": 0.1}
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(resolve("activation", leaky)(x), torch.tensor([-0.1, 2.0]))
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
        resolve("activation", choice)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("ops.activation=")
    assert says in str(err.value)


def test_a_users_models_py_that_clashes_is_named_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "models.py").write_text("def my_relu(x):\n    return x.clamp_min(0)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises((OpRefused, ValueError), match=f"your {tmp_path / 'models.py'} is hidden by "
                                                "the lab's package models; rename it"):
        resolve("activation", "models:my_relu")
    # the card, run from that directory: Python finds the user's models.py first
    monkeypatch.delitem(sys.modules, "models")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert clash() == (f"error: your {tmp_path / 'models.py'} hides the lab's package 'models' "
                       "from the card; rename it (e.g. my_models.py) and name your op by the "
                       "new module")


def test_the_precheck_is_the_cards_training_row(capsys, monkeypatch):
    monkeypatch.setattr(cli, "trains", lambda *a, **k: ("n/a", "not trained here"))
    note = precheck("activation", user_ops.relu_one_at_zero, device="cpu", dtype=torch.float32)
    assert main(["activation", U + "relu_one_at_zero", "--no-compile", "--quick"]) == 1
    wrong = capsys.readouterr().out.splitlines()[1].split("wrong", 1)[1].strip()
    assert note.startswith(f"note: ops.activation: it differs from its contract: {wrong}")
    assert note.endswith("the run goes on, its curves show whether it trains the same (the "
                         "card: python -m fitting.opcheck activation '<your op>')")
    assert precheck("activation", MyReLU.apply, device="cpu", dtype=torch.float32) is None


CARDED = [("activation", EX + "tutorial_ops:MyReLU"), ("legendre_p3", EX + "tutorial_ops:SinhBad"),
          ("activation", U + "ReLUInFloat32"), ("linear", U + "LinearDropsBiasTangent"),
          ("activation", U + "ReLUOnce"), ("activation", EX + "ste:RoundSTE"),
          ("legendre_p3", "models.ops.exhibits.legendre_numpy:legendre_p3_numpy"),
          ("activation", "torch.nn.functional:gelu"), ("activation", U + "relu_one_at_zero")]


@pytest.mark.parametrize(("slot", "spec"), CARDED, ids=[s for _, s in CARDED])
def test_the_precheck_refuses_a_use_exactly_where_the_card_fails_it(slot, spec, capsys,
                                                                      monkeypatch):
    monkeypatch.setattr(cli, "trains", lambda *a, **k: ("n/a", "not trained here"))
    monkeypatch.setattr(cli, "cost", lambda *a, **k: ("measured", "not measured here"))
    main([slot, spec, "--no-compile"])
    out = capsys.readouterr().out
    rows = {line[:16].strip(): line[17:40].strip() for line in out.splitlines()}
    fn = resolve(slot, spec)
    for use in ("second_order", "forward_ad"):  # the pre-check runs training too
        failed = rows[NAMES[use]] in ("wrong", "unsupported", "cannot run")
        try:
            note = precheck(slot, fn, device="cpu", dtype=torch.float32, uses=("training", use))
        except OpRefused as err:  # none of these changes a tensor behind autograd's back
            assert failed and f": {rows[NAMES[use]]} for {NAMES[use]}: " in str(err)
        else:
            assert not failed, (use, rows)
            # a first-order difference from its contract, or a surrogate gradient: a note
            assert (note is None) == (rows["training"] != "wrong" and "surrogate" not in out)


def test_the_precheck_refuses_what_the_optimizer_needs_and_the_op_lacks():
    assert uses_.hessian is derivatives.hessian and uses_.jacobian is derivatives.jacobian
    with pytest.raises(OpRefused, match="ops.activation: unsupported for second order: its "
                       "hessian is all zeros: .* optimizer=newton needs it"):
        precheck("activation", user_ops.ReLUOnce.apply, device="cpu", dtype=torch.float32,
                 uses=("training", "second_order"))
    precheck("legendre_p3", LegendrePolynomial3.apply, device="cpu", dtype=torch.float64,
             uses=("training", "second_order", "forward_ad"))


def test_the_precheck_runs_the_compiles_row_for_a_compiled_run():
    precheck("activation", MyReLU.apply, device="cpu", dtype=torch.float32, uses=("training",))
    # a graph break is a note: compile=true runs the op with it
    precheck("activation", user_ops.relu_item, device="cpu", dtype=torch.float32,
             uses=("training", "compiles"))
    with pytest.raises(OpRefused, match="unsupported for compiles: torch.compile.*; compile=true "
                                        "needs it"):
        precheck("activation", user_ops.relu_no_fake, device="cpu", dtype=torch.float32,
                 uses=("training", "compiles"))


def test_the_refusal_names_the_cards_real_command_a_dict_spec_quoted(capsys):
    choice = {"_target_": "torch.nn.functional.leaky_relu", "_partial_": True,
              "negative_slope": 0.1}
    line = command("activation", choice, torch.float64, "cpu")
    assert line == ("python -m fitting.opcheck activation '{_target_:torch.nn.functional.leaky_"
                    "relu,_partial_:true,negative_slope:0.1}' --dtype float64")
    assert main([*shlex.split(line)[3:], "--no-compile", "--quick"]) == 0, capsys.readouterr()


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
