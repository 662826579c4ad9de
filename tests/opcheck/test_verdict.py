"""The graded verdict from the command line: exit 0 when nothing is wrong (an op that lacks a
capability is not wrong), 1 when something is, 2 when the op cannot run or exits or hangs;
any reference (--ref), extra arguments in the spec, --rtol/--atol on the card."""

import subprocess
import sys

import pytest
import torch

from fitting.opcheck import card as card_mod
from fitting.opcheck.card import CardAborted, run_card
from fitting.opcheck.cli import main
from fitting.opcheck.subject import Subject
from models.ops.choice import OPS, resolve_op

pytestmark = pytest.mark.usefixtures("one_thread")
WRONG = "tests.opcheck.wrong_ops:"
SECOND = "| right for second order (double backward: optimizer=newton) |"
FORWARD_AD = "| right for forward AD (jvp, vmap: optimizer=lm) |"


def card(tmp_path, capsys, *argv) -> tuple[int, str, str]:
    code = main([*argv, "--quick", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    text = (tmp_path / "opcheck.md").read_text() if (tmp_path / "opcheck.md").exists() else ""
    return code, text, err


@pytest.mark.parametrize(("argv", "code", "rows"), [
    (["activation", "swish:Swish", "--ref", "torch.nn.functional:silu"], 0,
     ["| right for training (forward, first-order gradients) | pass | ",
      "| edge values 0, -0, ±inf, NaN (float32) | pass | "]),
    (["activation", "swish:Swish"], 1, ["| forward parity float32 | wrong | ",
                                        "| right for training (forward, first-order gradients) | wrong | "]),
    (["legendre_p3", "tutorial_ops:LegendrePolynomial3"], 0,
     [f"{FORWARD_AD} unsupported | forward AD (jvp): no jvp: the Function defines no jvp "
      "staticmethod |", f"{SECOND} pass | gradgradcheck |"]),
    (["activation", "tests.opcheck.library_ops:relu"], 0,
     [f"{FORWARD_AD} unsupported | forward AD (jvp): torch.library op: torch drops the tangent",
      "| passes torch.library.opcheck | pass | "]),
    (["activation", "tests.opcheck.bad_ops:ReLUOnce"], 0,
     [f"{SECOND} unsupported | gradgradcheck: once_differentiable: its backward is not "
      "differentiable |"]),
    (["activation", "torch.nn.functional:leaky_relu(negative_slope=0.1)", "--ref",
      "tests.opcheck.any_ops:leaky_relu(slope=0.1)"], 0, ["**PASS**"]),
    (["activation", "tests.opcheck.bad_ops:relu_forward_off", "--rtol", "0.001"], 0,
     ["--rtol 0.001", "| forward parity float32 | pass | max abs err ", "(rtol 0.001, atol 1e-05)"]),
])  # fmt: skip
def test_the_verdict_and_the_exit_status(argv, code, rows, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend("docs/examples")
    got, text, err = card(tmp_path, capsys, *argv)
    assert got == code, err or text
    for row in rows:
        assert row in text, (row, text)


def test_extra_arguments_that_do_not_parse_exit_2_in_one_line(tmp_path, capsys):
    code, _, err = card(tmp_path, capsys, "activation",
                        "torch.nn.functional:leaky_relu(negative_slope=)")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: ops.activation=torch.nn.functional:leaky_relu(negative_slope=): "
                          "malformed arguments '(negative_slope=)': expected (name=value, ...)")


def test_an_op_written_for_int_strides_fails_before_the_card(tmp_path, capsys):
    code, text, err = card(tmp_path, capsys, "conv_bn", WRONG + "conv_bn_ints_only")
    assert code == 2 and not text
    assert "on a reference input raised TypeError: " in err
    assert err.rstrip().endswith("(stride, padding and dilation come as tuples, e.g. (1, 1), as "
                                 "nn.Conv2d stores them)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch has CUDA")
def test_device_cuda_without_cuda_exits_2(tmp_path, capsys):
    code, _, err = card(tmp_path, capsys, "activation", "--device", "cuda")
    assert code == 2
    assert err == (f"error: --device cuda: this torch ({torch.__version__}) sees no CUDA device; "
                   "use --device cpu\n")


def test_an_op_that_exits_never_reads_as_success(tmp_path, capsys):
    code, text, err = card(tmp_path, capsys, "activation", WRONG + "exits")
    assert code == 2 and not text
    assert err == ("error: ops.activation=tests.opcheck.wrong_ops:exits: called sys.exit(3); an "
                   "op must return a tensor or raise\n")
    s = Subject("activation", "exits", resolve_op("activation", WRONG + "exits").fn,
                OPS["activation"], quick=True)
    with pytest.raises(CardAborted) as info:
        run_card(s, None, resolve_op("activation", "custom"))
    assert str(info.value) == ("ops.activation=exits (against builtin): called sys.exit(3); an op "
                               "must return a tensor or raise (in the card's parity check)")


def test_an_op_that_hangs_ends_the_card(monkeypatch):
    monkeypatch.setattr(card_mod, "CALL_TIMEOUT", 0.5)
    s = Subject("activation", "hangs", resolve_op("activation", WRONG + "hangs").fn,
                OPS["activation"], quick=True)
    with pytest.raises(CardAborted) as info:
        run_card(s, None, resolve_op("activation", "custom"))
    assert str(info.value) == (
        "ops.activation=hangs (against builtin): did not return within 0.5 s (an endless loop, "
        "or a deadlock?) (in the card's parity check)"
    )


def test_the_command_exits_2_while_a_hung_call_still_runs(tmp_path):
    code = (
        "import sys, runpy; import fitting.opcheck.card as card; card.CALL_TIMEOUT = 1.0; "
        f"sys.argv = ['opcheck', 'activation', '{WRONG}hangs_in_float64', '--quick', "
        f"'--out', {str(tmp_path)!r}]; runpy.run_module('fitting.opcheck', run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith(
        f"error: ops.activation={WRONG}hangs_in_float64 (against builtin): did not return within "
        "1 s (an endless loop, or a deadlock?) (in the card's parity check)\n"
    )
