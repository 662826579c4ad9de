"""The card, run in-process as `python -m fitting.opcheck` runs it: one test per rule of the
verdict (docs/ops.md), each on a deliberately written op (tests/opcheck/user_ops.py) or on one
of docs/examples/; for each row an op that only that row catches."""

import pytest
import torch

from fitting.opcheck import boundary, cli, verdict
from fitting.opcheck.cli import main

U = "tests.opcheck.user_ops:"
EX = "docs.examples."


@pytest.fixture(autouse=True)
def _quick_rows(request, monkeypatch):
    """The cost and trains-the-same rows take seconds: stubbed unless a test asks for them."""
    if "real_rows" not in request.fixturenames:
        monkeypatch.setattr(cli, "cost", lambda *a, **k: ("measured", "not measured here"))
        monkeypatch.setattr(cli, "trains", lambda *a, **k: ("n/a", "not trained here"))


@pytest.fixture
def real_rows():
    """The cost and trains-the-same rows as the card runs them."""


def card(capsys, *argv, compile=False):
    code = main([*argv, *([] if compile else ["--no-compile"])])
    out = capsys.readouterr()
    return code, out.out + out.err


def row(text: str, use: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(use))


def status(text: str, use: str) -> str:
    return row(text, use)[17:40].strip()


def test_an_ste_against_its_reference_is_the_same_as_the_reference(capsys):
    code, out = card(capsys, "any", EX + "ste:RoundSTE", "--ref", EX + "ste:round_ste_reference",
                     "--shape", "4,8")
    assert code == 0, out
    assert "same as the reference: gradcheck (float64) fails for the reference too" in out
    assert status(out, "second order") == "pass"


def test_an_ste_judged_against_itself_is_a_surrogate_gradient_a_note(capsys):
    code, out = card(capsys, "activation", EX + "ste:RoundSTE")
    assert code == 0, out
    assert "against itself (it does not compute relu" in out.splitlines()[0]
    assert "its gradient is not its forward's derivative (a straight-through or surrogate " \
           "gradient?)" in out


def test_the_tutorial_myrelu_passes_with_a_note_on_its_kink(capsys):
    code, out = card(capsys, "activation", EX + "tutorial_ops:MyReLU")
    assert code == 0, out
    assert status(out, "training") == "note"
    assert "at input[0] = 0 the reference has a kink (one-sided derivatives 0 and 1): the " \
           "gradient 1, the reference's 0, both right" in out


def test_the_textbook_where_relu_passes_with_a_note_on_nan(capsys):
    code, out = card(capsys, "activation", U + "where_relu")
    assert code == 0, out
    assert "note: x = ±inf, NaN: forward at x[2] = nan: 0 vs nan" in out


def test_a_relu_that_is_1_at_0_is_wrong_even_though_it_trains_the_same(capsys, monkeypatch):
    monkeypatch.setattr(cli, "trains", lambda *a, **k: ("pass", "the same within the seed spread"))
    code, out = card(capsys, "activation", U + "relu_one_at_zero")
    assert code == 1  # a wrong value at an input training never meets: not an approximation
    assert status(out, "training") == "wrong" and "forward at x[0] = 0: 1 vs 0" in out


def test_strict_turns_notes_into_failures(capsys):
    assert card(capsys, "activation", U + "where_relu", "--strict")[0] == 1


def test_an_op_raising_on_nan_is_a_note_and_the_card_goes_on(capsys):
    code, out = card(capsys, "activation", U + "nan_checked_relu")
    assert code == 0, out
    assert "note: x = ±inf, NaN: calling it raised ValueError: relu: x has NaN" in out
    assert status(out, "forward AD") == "pass"


def test_an_in_place_op_marking_its_input_dirty_is_called_as_models_call_it(capsys):
    code, out = card(capsys, "any", U + "HardTanhInPlace", "--ref",
                     "torch.nn.functional:hardtanh", "--shape", "4,8")
    assert code == 0, out
    assert status(out, "training") == "pass"


def test_an_input_changed_in_place_without_mark_dirty_is_wrong(capsys):
    code, out = card(capsys, "any", U + "AddOneNoDirty", "--ref", U + "add_one", "--shape", "4,8")
    assert code == 1, out  # its values are x + 1 and its gradient 1: only the inputs tell
    assert row(out, "training").endswith("x: it changes x in place without ctx.mark_dirty: "
                                         "autograd does not know, so what used x before gets "
                                         "wrong gradients")


def test_a_tensor_argument_that_does_not_require_grad_needs_no_gradient(capsys):
    code, out = card(capsys, "any", U + "mse", "--ref", "torch.nn.functional:mse_loss",
                     "--inputs", U + "mse_samples")
    assert code == 0, out
    assert "target" not in out


def test_a_multi_output_library_op_with_a_list_argument_gets_torch_library_opcheck(capsys):
    code, out = card(capsys, "any", U + "scale_shift", "--ref", U + "scale_shift_reference",
                     "--inputs", U + "scale_shift_samples")
    assert code == 0, out
    assert status(out, "training") == "pass"
    assert status(out, "torch.library") == "pass" and "test_autograd_registration" in out
    # torch drops a library op's forward-AD tangents: what lm would get, said so
    assert status(out, "forward AD") == "unsupported" and "all zeros" in out


def test_a_2d_only_linear_passes_with_a_note_on_nd_input(capsys):
    code, out = card(capsys, "linear", U + "linear_2d")
    assert code == 0, out
    assert "note: x N-D (2, 3, 8), which no model passes: calling it raised" in out


def test_a_relu_off_by_half_a_percent_is_wrong_at_the_float32_tolerance(capsys):
    argv = ("any", U + "relu_off", "--ref", "torch:relu", "--shape", "4,8")
    code, out = card(capsys, *argv)
    assert code == 1, out
    assert row(out, "training").split()[1:5] == ["wrong", "x:", "forward", "at"]
    assert "forward at x[1, 3] = 2.11773: 2.12831 vs 2.11773; 12 of 32 differ beyond" in out
    assert card(capsys, *argv, "--rtol", "0.01")[0] == 0  # what --rtol is for


def test_a_relu_computed_in_float32_inside_is_judged_at_its_own_precision(capsys):
    code, out = card(capsys, "activation", U + "ReLUInFloat32")
    assert code == 0, out  # gradcheck in float64 would see float32's rounding, not a bug
    assert "gradcheck (float32): analytical = numerical" in row(out, "training")
    assert "note: it computes in float32 on float64 inputs: its checks ran at that precision" in out
    assert "gradgradcheck (float32): analytical = numerical" in row(out, "second order")


def test_sinhbad_is_wrong_for_second_order_alone(capsys):
    code, out = card(capsys, "legendre_p3", EX + "tutorial_ops:SinhBad")
    assert code == 1, out
    assert [status(out, r) for r in ("training", "second order", "forward AD")] == \
        ["pass", "wrong", "pass"]
    assert "gradgradcheck (float64): GradcheckError: Jacobian mismatch" in row(out, "second order")


def test_a_dropped_tangent_is_wrong_for_forward_ad_alone(capsys):
    code, out = card(capsys, "linear", U + "LinearDropsBiasTangent")
    assert code == 1, out
    assert [status(out, r) for r in ("training", "second order", "forward AD")] == \
        ["note", "pass", "wrong"]
    assert "jacobian at d out[16]/d bias[1]: by forward AD vs by its backward 0 vs 1" in out


def test_a_kink_is_a_note_in_forward_ad_too(capsys):
    code, out = card(capsys, "any", U + "HardSigmoid", "--ref", "torch.nn.functional:hardsigmoid",
                     "--inputs", U + "hard_sigmoid_samples")
    assert code == 0, out
    assert status(out, "forward AD") == "note"
    assert "d out[1]/d x[1]: 0.166667 by forward AD, 0 by its backward: a kink" in out


def test_rows_run_what_newton_and_lm_run_on_a_forward_ctx_function(capsys):
    code, out = card(capsys, "legendre_p3", EX + "tutorial_ops:LegendrePolynomial3")
    assert code == 0, out
    assert "hessian (what optimizer=newton runs) runs; gradgradcheck (float64): analytical = " \
           "numerical" in out
    assert "jacobian (what optimizer=lm runs) by forward AD as by its backward" in out


def test_a_once_differentiable_op_is_unsupported_for_second_order(capsys):
    code, out = card(capsys, "activation", U + "ReLUOnce")
    assert code == 0, out
    assert status(out, "second order") == "unsupported"
    assert "its backward is not differentiable" in out


def test_messages_use_the_forwards_own_parameter_names(capsys):
    code, out = card(capsys, "linear", U + "LinearHalfWeightGrad")
    assert code == 1
    assert "gradient of weight at weight[0, 2]" in out
    assert "with respect to weight" in out  # gradcheck's "input 1", named
    assert "args[" not in out


def test_a_graph_break_is_a_note_naming_its_first_real_cause(capsys):
    code, out = card(capsys, "activation", U + "relu_item", compile=True)
    assert code == 0 and status(out, "compiles") == "note", out
    said = out.split("\ncompiles", 1)[1].split("\ntorch.library", 1)[0]
    assert "a graph break: torch.compile(fullgraph=True" in said and "x.sum().item()" in said
    assert "Observed exception" not in said


def test_an_op_that_does_not_compile_at_all_is_unsupported(capsys):
    code, out = card(capsys, "activation", U + "relu_no_fake", compile=True)
    assert status(out, "compiles") == "unsupported", out
    assert code == 1 and status(out, "torch.library") == "wrong", out  # its fake tensor test
    assert "fullgraph=False" in row(out, "compiles") and "no fake impl" in row(out, "compiles")


def test_an_op_with_arguments_takes_hydras_syntax(capsys):
    spec = "{_target_:torch.nn.functional.leaky_relu,_partial_:true,negative_slope:0.1}"
    code, out = card(capsys, "activation", "{_target_:leaky.leaky_relu,_partial_:true,"
                     "negative_slope:0.1}".replace("leaky.", EX + "leaky."), "--ref", spec)
    assert code == 0, out
    assert out.startswith("ops.activation=docs.examples.leaky.leaky_relu(negative_slope=0.1) "
                          "against torch.nn.functional.leaky_relu(negative_slope=0.1)")


@pytest.mark.parametrize(("argv", "says"), [
    ([U + "exits"], "calling it on x, as the mlp calls it: it called sys.exit(3)"),
    ([U + "interrupts"], "calling it on x, as the mlp calls it: it raised KeyboardInterrupt"),
    ([U + "loops"], "calling it on x, as the mlp calls it: its first call did not return "
                    "within 0.5 s (the limit of a first call, which may compile"),
    ([U + "sleeps"], "calling it on x, as the mlp calls it: its first call did not return "
                     "within 0.5 s"),
    ([U + "sleeps_after_its_first_calls", "--limit", "0.5"], ": it did not return within 0.5 s "
     "(the limit per call, after the first: --limit, op_limit_s): an endless loop or a wait?"),
    ([U + "allocates"], "it ran out of memory: [enforce fail"),
    ([U + "returns_none"], "it returns NoneType on x, as the mlp calls it; the slot's op (relu) "
                           "returns tensor (4, 8) float32"),
    ([U + "returns_int"], "it returns int on x"),
    ([U + "returns_sum"], "it returns tensor () float32 on x"),
    ([U + "returns_float64"], "it returns tensor (4, 8) float64 on x"),
    ([U + "RaisesInBackward"], "its backward on x, as the mlp calls it: ValueError: backward: "),
    ([U + "ExitsInBackward"], "its backward on x, as the mlp calls it: it called sys.exit(1)"),
    ([U + "mse"], "calling it on x, as the mlp calls it: TypeError"),
    (["legendre_p3", EX + "tutorial_ops:Sinh"], "it returns tuple (tensor (16,) float32, tensor"),
    (["any", EX + "tutorial_ops:Sinh", "--ref", "torch:sinh", "--shape", "4"],
     "; the reference returns tensor (4,) float32"),
    (["torch.nn.functional:leaky_relu(negative_slope=0.1)"], "not a SPEC in Hydra's override"),
    (["no_such_module:fn"], "no_such_module:fn: ModuleNotFoundError"),
    ([U + "where_relu", "--device", "no_such_device"], "--device no_such_device: not available"),
])
def test_an_op_that_cannot_run_exits_2_with_one_line(capsys, monkeypatch, argv, says):
    if "within 0.5 s" in says:  # a short limit only where the op hangs: a lazy import torch
        monkeypatch.setattr(boundary, "FIRST_LIMIT_S", 0.5)  # makes on a first call must not
        # time out
    argv = argv if argv[0] in ("legendre_p3", "any") else ["activation", *argv]
    code, out = card(capsys, *argv)
    assert code == 2
    assert out.startswith("error: ") and out.count("\n") == 1 and says in out, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_exits_2_with_one_line(capsys):
    code, out = card(capsys, "activation", "custom", "--device", "cuda")
    assert code == 2 and out.count("\n") == 1
    assert out.startswith("error: --device cuda: not available here: ")


def test_ours_trains_identically_to_builtin_and_the_card_shows_what_it_costs(capsys, real_rows):
    code, out = card(capsys, "activation", "custom", "--quick")
    assert code == 0, out
    assert status(out, "trains the same") == "pass"
    assert "identical: every seed's curve is the reference's" in row(out, "trains the same")
    cost = row(out, "cost")
    assert "× time, 1.00× saved" in cost and "on x (256, 64), as the mlp calls it" in cost
    assert "saved for backward 64.0 KiB vs 64.0 KiB" in cost  # ours saves its output, as relu


def test_a_tanh_gelu_trains_the_same_as_gelu_exit_0_with_a_note(capsys, real_rows):
    code, out = card(capsys, "activation", "{_target_:torch.nn.functional.gelu,_partial_:true,"
                     "approximate:tanh}", "--ref", "torch.nn.functional:gelu")
    assert code == 0, out
    assert status(out, "training") == "note"
    assert "note: approximate, and it trains the same: x, as the mlp calls it: forward" in out
    assert row(out, "trains the same").split()[3:8] == ["pass", "the", "same", "within", "the"]


def test_a_relu_with_a_hundredth_of_the_gradient_does_not_train_the_same(capsys, real_rows):
    code, out = card(capsys, "activation", U + "ReLUGradOver100")
    assert code == 1, out
    trained = row(out, "trains the same")
    assert trained.split()[3] == "wrong" and "differs (p < 0.05)" in trained
    assert verdict.RANK.index("wrong") == len(verdict.RANK) - 2  # "cannot run" alone is worse


def test_trains_the_same_needs_a_reference_and_a_slot(capsys, real_rows):
    _, out = card(capsys, "legendre_p3", EX + "tutorial_ops:SinhBad", "--quick")
    assert row(out, "trains the same").split()[3:] == ["n/a", "no", "reference:", "give", "--ref"]
    _, out = card(capsys, "any", EX + "ste:RoundSTE", "--ref", EX + "ste:round_ste_reference",
                  "--shape", "4,8", "--quick")
    assert "n/a                    no slot to train it in (--train-in SLOT" in out


def test_the_cost_row_is_ours_over_the_references(capsys, real_rows, monkeypatch):
    monkeypatch.setattr(cli, "trains", lambda *a, **k: ("n/a", "not trained here"))
    code, out = card(capsys, "activation", U + "slow_relu", "--quick")
    assert code == 0, out
    # 200 more additions each way: 7.7x relu's time (2 loaded cores): > 1 on any CPU, any load
    times = float(row(out, "cost").split()[2].removesuffix("×"))
    assert times > 1, row(out, "cost")
