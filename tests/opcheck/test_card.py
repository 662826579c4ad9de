"""The card, run in-process as `python -m fitting.opcheck` runs it: one test per rule of the
verdict (docs/ops.md), each on a deliberately written op (tests/opcheck/user_ops.py) or on one
of docs/examples/."""

import pytest

from fitting.opcheck.cli import main

U = "tests.opcheck.user_ops:"
EX = "docs.examples."


def card(capsys, *argv, compile=False):
    code = main([*argv, *([] if compile else ["--no-compile"])])
    out = capsys.readouterr()
    return code, out.out + out.err


def row(text: str, use: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(use))


def test_an_ste_against_its_reference_is_the_same_as_the_reference(capsys):
    code, out = card(capsys, "any", EX + "ste:RoundSTE", "--ref", EX + "ste:round_ste_reference",
                     "--shape", "4,8")
    assert code == 0, out
    assert "same as the reference: gradcheck fails for the reference too" in out
    assert row(out, "second order").split()[2] == "pass"


def test_the_tutorial_myrelu_passes_with_a_note_on_its_kink(capsys):
    code, out = card(capsys, "activation", EX + "tutorial_ops:MyReLU")
    assert code == 0, out
    assert row(out, "training").split()[1] == "note"
    assert "at input[0] = 0 the reference has a kink (one-sided derivatives 0 and 1): the " \
           "gradient 1, the reference's 0, both right" in out


def test_the_textbook_where_relu_passes_with_a_note_on_nan(capsys):
    code, out = card(capsys, "activation", U + "where_relu")
    assert code == 0, out
    assert "note: x = ±inf, NaN: forward at x[2] = nan: 0 vs nan" in out


def test_a_relu_that_is_1_at_0_is_wrong(capsys):
    code, out = card(capsys, "activation", U + "relu_one_at_zero")
    assert code == 1
    assert "training       wrong" in out and "forward at x[0] = 0: 1 vs 0" in out


def test_strict_turns_notes_into_failures(capsys):
    assert card(capsys, "activation", U + "where_relu", "--strict")[0] == 1


def test_an_op_raising_on_nan_is_a_note_and_the_card_goes_on(capsys):
    code, out = card(capsys, "activation", U + "nan_checked_relu")
    assert code == 0, out
    assert "note: x = ±inf, NaN: calling it raised ValueError: relu: x has NaN" in out
    assert row(out, "forward AD").split()[2] == "pass"


def test_an_in_place_op_marking_its_input_dirty_is_called_as_models_call_it(capsys):
    code, out = card(capsys, "any", U + "HardTanhInPlace", "--ref",
                     "torch.nn.functional:hardtanh", "--shape", "4,8")
    assert code == 0, out
    assert row(out, "training").split()[1] == "pass"


def test_a_tensor_argument_that_does_not_require_grad_needs_no_gradient(capsys):
    code, out = card(capsys, "any", U + "mse", "--ref", "torch.nn.functional:mse_loss",
                     "--inputs", U + "mse_samples")
    assert code == 0, out
    assert "target" not in out


def test_a_multi_output_library_op_with_a_list_argument_gets_torch_library_opcheck(capsys):
    code, out = card(capsys, "any", U + "scale_shift", "--ref", U + "scale_shift_reference",
                     "--inputs", U + "scale_shift_samples")
    assert code == 0, out
    assert row(out, "training").split()[1] == "pass"
    assert row(out, "torch.library").split()[1] == "pass"
    assert "test_autograd_registration" in out
    # torch drops a library op's forward-AD tangents: what lm would get, said so
    assert "forward AD     unsupported" in out and "all zeros" in out


def test_a_2d_only_linear_passes_with_a_note_on_nd_input(capsys):
    code, out = card(capsys, "linear", U + "linear_2d")
    assert code == 0, out
    assert "note: x N-D (2, 3, 8), which no model passes: calling it raised" in out


def test_second_order_is_not_judged_while_first_order_is_wrong(capsys):
    code, out = card(capsys, "any", U + "LayerNormNoMeanTerm", "--ref",
                     "torch.nn.functional:layer_norm", "--inputs", U + "layer_norm_samples")
    assert code == 1
    assert row(out, "second order").split()[2:4] == ["not", "judged"]


def test_rows_run_what_newton_and_lm_run_on_a_forward_ctx_function(capsys):
    code, out = card(capsys, "legendre_p3", EX + "tutorial_ops:LegendrePolynomial3")
    assert code == 0, out
    assert "hessian (what optimizer=newton runs) as the reference's" in out
    assert "jacobian (what optimizer=lm runs) as the reference's" in out


def test_a_once_differentiable_op_is_unsupported_for_second_order(capsys):
    code, out = card(capsys, "activation", U + "ReLUOnce")
    assert code == 0, out
    assert row(out, "second order").split()[2] == "unsupported"
    assert "its backward is not differentiable" in out


def test_messages_use_the_forwards_own_parameter_names(capsys):
    code, out = card(capsys, "linear", U + "LinearHalfWeightGrad")
    assert code == 1
    assert "gradient of weight at weight[0, 2]" in out
    assert "with respect to weight" in out  # gradcheck's "input 1", named
    assert "args[" not in out


def test_a_compile_failure_names_its_first_real_cause(capsys):
    code, out = card(capsys, "activation", U + "relu_item", compile=True)
    assert code == 0, out
    compiles = row(out, "compiles")
    assert "unsupported" in compiles and "x.sum().item()" in compiles
    assert "Observed exception" not in compiles


def test_an_op_with_arguments_takes_hydras_syntax(capsys):
    spec = "{_target_:torch.nn.functional.leaky_relu,_partial_:true,negative_slope:0.1}"
    code, out = card(capsys, "activation", "{_target_:leaky.leaky_relu,_partial_:true,"
                     "negative_slope:0.1}".replace("leaky.", EX + "leaky."), "--ref", spec)
    assert code == 0, out
    assert out.startswith("ops.activation=docs.examples.leaky.leaky_relu(negative_slope=0.1) "
                          "against torch.nn.functional.leaky_relu(negative_slope=0.1)")


@pytest.mark.parametrize(("spec", "says"), [
    (U + "exits", f"error: ops.activation={U}exits: it called sys.exit(3)"),
    (U + "mse", "calling it on x, as the mlp calls it: TypeError"),
    ("torch.nn.functional:leaky_relu(negative_slope=0.1)", "not a SPEC in Hydra's override"),
    ("no_such_module:fn", "no_such_module:fn: ModuleNotFoundError"),
])
def test_an_op_that_cannot_run_exits_2_with_one_line(capsys, spec, says):
    code, out = card(capsys, "activation", spec)
    assert code == 2
    assert out.count("\n") == 1 and says in out, out
