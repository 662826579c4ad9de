"""The card calls each slot the way the models do (edge values, eval mode, tuple strides, N-D
input, bfloat16), compares running statistics within tolerance, and names the input whose
gradient is wrong, missing, or modified in place."""

import pytest
import torch

from fitting.opcheck.checks import cases, gradcheck, parity
from fitting.opcheck.compile_checks import compile_fullgraph
from fitting.opcheck.subject import Subject, compare
from fitting.opcheck.transforms import gradgradcheck
from models.ops.choice import OPS, resolve_op

pytestmark = pytest.mark.usefixtures("one_thread")
WRONG = "tests.opcheck.wrong_ops:"


def subject(op: str, spec: str) -> Subject:
    return Subject(op, spec, resolve_op(op, spec).fn, OPS[op], quick=True)


def rows(op: str, spec: str, dtype=torch.float32) -> dict:
    return {c.name: c for c in cases(subject(op, spec), dtype)}


def test_an_activation_wrong_at_zero_or_on_nan_fails_the_edge_values():
    edge = "edge values 0, -0, ±inf, NaN (float32)"
    check = rows("activation", WRONG + "ReLUWrongAtZero")[edge]
    assert check.status == "wrong"
    assert check.detail.startswith("backward: gradient of x: max abs err ")
    assert "; worst at x = 0: " in check.detail and check.detail.endswith(" vs 0")
    check = rows("activation", WRONG + "relu_nan_to_zero")[edge]
    assert check.status == "wrong"
    assert check.detail.startswith("forward: max abs err inf, max rel err inf")
    assert check.detail.endswith("worst at x = nan: 0 vs nan")
    found = rows("activation", "custom")
    assert [c.status for c in found.values()] == ["pass"] * 3, found


def test_the_empty_and_non_contiguous_cases_run():
    found = rows("activation", "custom")
    assert set(found) == {"edge values 0, -0, ±inf, NaN (float32)", "empty input (0, 8) (float32)",
                          "non-contiguous input (4, 8) (float32)"}  # fmt: skip


def test_a_conv_bn_that_ignores_training_fails_in_eval_mode():
    check = rows("conv_bn", WRONG + "conv_bn_ignores_training")[
        "eval mode (training=False, running stats) (float32)"]
    assert check.status == "wrong" and check.detail.startswith("forward: max abs err ")
    s = subject("conv_bn", WRONG + "conv_bn_ignores_training")
    assert [c.status for c in parity(s, torch.float32)] == ["pass", "pass"]  # training mode


def test_running_stats_are_compared_within_tolerance_and_named():
    forward, _ = parity(subject("conv_bn", WRONG + "conv_bn_biased_var"), torch.float32)
    assert forward.status == "wrong"
    assert forward.detail.startswith(
        "running_var after the call differs from the reference's: max abs err "
    )
    for dtype in (torch.float32, torch.float64):
        forward, _ = parity(subject("conv_bn", WRONG + "conv_bn_tiny_stat_diff"), dtype)
        assert forward.status == "pass", forward


def test_a_linear_for_2d_input_only_fails_the_n_d_case():
    check = rows("linear", WRONG + "linear_2d_only")["N-D input (2, 3, 8) (float32)"]
    assert check.status == "wrong" and check.detail.startswith("forward: the op raised ")


def test_a_missing_gradient_is_named_and_blamed_on_the_op():
    s = subject("linear", WRONG + "LinearNoWeightGrad")
    _, backward = parity(s, torch.float32)
    assert (backward.status, backward.detail) == ("wrong", (
        "its backward returns no gradient for weight, so weight would never train (a None "
        "gradient freezes a parameter)"))
    check = gradcheck(s)
    assert check.status == "wrong"
    assert "Jacobian mismatch for output 0 with respect to input 1 (weight)" in check.detail
    check = gradgradcheck(s)
    assert (check.status, check.detail) == (
        "skip", "the backward gives no gradient for weight (see backward parity)")
    check = compile_fullgraph(s)
    assert "not have been used in the graph" not in check.detail


def test_an_input_modified_in_place_is_named():
    forward, backward = parity(subject("activation", WRONG + "ReLUInPlace"), torch.float32)
    says = "modifies its input x in place; call ctx.mark_dirty(x) or work on a copy"
    assert (forward.status, forward.detail) == ("wrong", says)


def test_bfloat16_has_looser_tolerances():
    s = subject("activation", "custom")
    forward, backward = parity(s, torch.bfloat16)
    assert forward.status == backward.status == "pass"
    assert "(rtol 0.016, atol 0.01)" in forward.detail
    assert [c.status for c in cases(s, torch.bfloat16)] == ["pass"] * 3


def test_errors_are_reported_with_a_denominator_that_is_never_zero():
    want = torch.tensor([0.0, 2.0])
    ok, detail = compare(torch.tensor([1e-3, 2.0]), want, (1e-5, 1e-5))
    assert not ok
    assert detail.startswith("max abs err 0.001, max rel err 100 (rtol 1e-05, atol 1e-05)")
    ok, detail = compare(torch.tensor([float("nan"), 2.0]), torch.tensor([float("nan"), 2.0]),
                         (1e-5, 1e-5))  # fmt: skip
    assert ok and detail.startswith("max abs err 0, max rel err 0 ")


def test_a_long_message_is_cut_after_a_sentence_not_inside_one():
    from fitting.opcheck.subject import line

    first = "Jacobian mismatch for output 0 with respect to input 1 (weight). " + "x" * 200
    text = line(RuntimeError(first + ". More words follow here.\nnumerical: tensor(...)"))
    assert text == "RuntimeError: Jacobian mismatch for output 0 with respect to input 1 (weight)."
    assert line(ValueError("short one\nsecond line")) == "ValueError: short one"
