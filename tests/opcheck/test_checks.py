"""The card's checks on deliberately wrong or limited ops: `wrong` what computes other numbers
than the reference, `unsupported` (with the reason) what an op does not implement."""

import pytest
import torch

from fitting.opcheck.checks import gradcheck, parity
from fitting.opcheck.compile_checks import compile_fullgraph, library_opcheck
from fitting.opcheck.cost import cost_alone, cost_in_model
from fitting.opcheck.subject import Subject
from fitting.opcheck.training import training
from fitting.opcheck.transforms import forward_ad, gradgradcheck, vmap
from models.ops.choice import OPS, resolve_op

pytestmark = pytest.mark.usefixtures("one_thread")
BAD = "tests.opcheck.bad_ops:"
LIB = "tests.opcheck.library_ops:"
WRONG = "tests.opcheck.wrong_ops:"


def subject(op: str, spec: str) -> Subject:
    return Subject(op, spec, resolve_op(op, spec).fn, OPS[op], quick=True)


def test_backward_off_by_a_factor_fails_gradcheck_and_training():
    s = subject("activation", BAD + "ReLUBackwardTimesTwo")
    check = gradcheck(s)
    assert check.status == "wrong"
    assert check.detail.startswith(
        "GradcheckError: Jacobian mismatch for output 0 with respect to input 0 (x)"
    )
    check = training(s)
    assert check.status == "wrong" and "max rel diff of the loss curves" in check.detail
    forward, backward = parity(s, torch.float32)
    assert (forward.status, backward.status) == ("pass", "wrong")
    assert backward.detail.startswith("gradient of x: max abs err ")
    assert "max rel err 1 " in backward.detail  # twice the gradient: off by 100%


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_off_by_a_little_fails_parity(dtype):
    forward, _ = parity(subject("activation", BAD + "relu_forward_off"), dtype)
    assert forward.status == "wrong"
    assert "max rel err 0.0001 " in forward.detail


def test_our_ops_pass_parity_gradcheck_and_training():
    for op in OPS:
        s = subject(op, "custom")
        checks = [*parity(s, torch.float32), *parity(s, torch.float64), gradcheck(s), training(s)]
        assert [c.status for c in checks] == ["pass"] * 6, (op, checks)


def test_missing_jvp_is_unsupported_not_wrong():
    s = subject("activation", BAD + "ReLUNoJvp")
    check = forward_ad(s)
    assert (check.status, check.detail) == (
        "unsupported", "no jvp: the Function defines no jvp staticmethod"
    )
    check = vmap(s)
    assert (check.status, check.detail) == (
        "unsupported", "its forward takes ctx: torch.func transforms need forward + setup_context"
    )
    s = subject("legendre_p3", BAD + "P3NoJvp")
    assert forward_ad(s).status == vmap(s).status == "unsupported"


def test_double_backward_that_raises_is_unsupported():
    check = gradgradcheck(subject("activation", BAD + "ReLUOnceRaises"))
    assert check.status == "unsupported"
    assert "double backward raises RuntimeError: ReLUOnceRaisesBackward: this backward is " \
        "once_differentiable" in check.detail
    check = gradgradcheck(subject("legendre_p3", "models.ops.exhibits:legendre_p3_numpy"))
    assert check.status == "unsupported"
    assert check.detail.startswith("double backward raises RuntimeError: ")


def test_once_differentiable_is_unsupported_with_the_reason():
    """torch's own once_differentiable gives None for the derivative of the gradient."""
    check = gradgradcheck(subject("activation", BAD + "ReLUOnce"))
    assert (check.status, check.detail) == (
        "unsupported", "once_differentiable: its backward is not differentiable"
    )


def test_double_backward_through_a_saved_intermediate_is_wrong_and_says_why():
    check = gradgradcheck(subject("legendre_p3", WRONG + "P3SavesIntermediate"))
    assert check.status == "wrong"
    assert check.detail.startswith("double backward runs but is wrong: GradcheckError: ")
    assert "likely cause: a tensor computed in forward and saved for backward is a constant to " \
        "double backward" in check.detail


def test_what_the_reference_cannot_do_is_a_skip():
    s = subject("conv_bn", "custom")
    check = vmap(s)
    assert check.status == "skip"
    assert check.detail.startswith(
        "the reference does not support it either: RuntimeError: Batch norm got a batched "
    )
    check = forward_ad(s)
    assert check.status == "unsupported" and "You must implement the jvp function" in check.detail


def test_compile_graph_break_is_unsupported_and_a_traceable_op_passes(monkeypatch):
    monkeypatch.syspath_prepend("docs/examples")
    check = compile_fullgraph(subject("activation", "my_relu:MyReLU"))
    assert check.status == "unsupported"
    assert check.detail.startswith(
        "graph break (compile=true still runs it, in pieces): Unsupported: Unsupported custom jvp"
    )
    check = compile_fullgraph(subject("activation", "my_relu:my_relu"))
    assert check.status == "pass" and check.detail.startswith("no graph break")


# torch.library.opcheck's failing test on the broken fake kernel warns from anomaly mode.
@pytest.mark.filterwarnings("ignore:Error detected in:UserWarning")
def test_library_opcheck_runs_on_torch_library_custom_ops_only():
    check = library_opcheck(subject("activation", "custom"))
    assert check.status == "skip" and check.detail.startswith("not a torch.library custom op")
    check = library_opcheck(subject("activation", LIB + "relu"))
    assert check.status == "pass" and "test_faketensor" in check.detail
    check = library_opcheck(subject("activation", LIB + "relu_bad_fake"))
    assert check.status == "wrong" and check.detail.startswith("test_faketensor")


def test_torch_library_op_has_no_forward_ad_which_is_unsupported():
    check = forward_ad(subject("activation", LIB + "relu"))
    assert (check.status, check.detail) == (
        "unsupported", "torch.library op: torch drops the tangent (it comes back zero)"
    )


@pytest.mark.parametrize(("spec", "says"), [
    ("P3JvpWrong", "tangent vs the reference's: max abs err "),
    ("P3JvpZero", "tangent vs the reference's: the tangent is silently zero where the "
                  "reference's is not: max abs err "),
])  # fmt: skip
def test_forward_ad_that_runs_but_is_wrong_is_wrong(spec, says):
    check = forward_ad(subject("legendre_p3", WRONG + spec))
    assert check.status == "wrong" and check.detail.startswith(says)


def test_cost_rows_report_bytes_alone_and_in_the_model():
    check = cost_alone(subject("activation", "models.ops:relu_masked"))
    assert check.status == "info"
    assert check.detail.startswith("activation 256x128: saves 32,768 vs 131,072 B (0.25x); fwd+bwd ")
    check = cost_in_model(subject("activation", "models.ops:relu_masked"))
    assert check.detail.startswith(
        "MLP 1-64-64-1, sin on 256 points: adds 32,768 B to the model's saved set (builtin 0 B); "
        "model saves 182,528 vs 149,760 B (1.22x); fwd+bwd "
    )
    check = cost_in_model(subject("activation", "custom"))
    assert "adds 0 B to the model's saved set (builtin 0 B); model saves 149,760 vs 149,760 B " \
        "(1.00x)" in check.detail
