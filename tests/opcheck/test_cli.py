"""`python -m fitting.opcheck`: exit 2 on a bad spec (one line), 1 when a check fails, 0 for an
op that passes, and opcheck.md written."""

import subprocess
import sys

import pytest

from fitting.opcheck.cli import main
from models.ops.choice import OPS

pytestmark = pytest.mark.usefixtures("one_thread")


def test_bad_spec_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "card"
    assert main(["activation", "tests.opcheck.bad_ops:no_such_op", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: ops.activation=tests.opcheck.bad_ops:no_such_op: module 'tests.opcheck.bad_ops' "
        f"({sys.modules['tests.opcheck.bad_ops'].__file__}) has no 'no_such_op'\n"
    )
    assert not out.exists()


def test_wrong_signature_exits_2_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "fitting.opcheck", "linear", "torch:relu", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: ops.linear=torch:relu: wrong signature: calling it as linear(x, weight, bias) "
        "raised TypeError: "
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "opcheck.md").exists()


def test_a_wrong_op_fails_the_card(tmp_path, capsys):
    spec = "tests.opcheck.bad_ops:ReLUBackwardTimesTwo"
    assert main(["activation", spec, "--quick", "--out", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    card = (tmp_path / "opcheck.md").read_text()
    for text in (printed, card):
        assert "| gradcheck | wrong | GradcheckError: Jacobian mismatch" in text
        assert "| training (mlp) | wrong | " in text
        assert "| forward parity float32 | pass | " in text
    assert card.startswith(f"# opcheck: `ops.activation={spec}`\n\n`python -m fitting.opcheck activation {spec}")
    assert "source: `" in card and "bad_ops.py` (sha256 `" in card
    assert "| right for training (forward, first-order gradients) | wrong | " in card
    assert "**WRONG**: " in card


def test_the_docs_example_passes_the_card(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend("docs/examples")
    assert main(["activation", "my_relu:my_relu", "--quick", "--out", str(tmp_path)]) == 0
    card = (tmp_path / "opcheck.md").read_text()
    checks = card.split("Verdict:")[0]
    rows = [line.split(" | ")[:2] for line in checks.splitlines() if line.startswith("| ")][1:]
    statuses = {name.removeprefix("| "): status for name, status in rows}
    assert statuses.pop("torch.library.opcheck") == "skip"
    assert statuses.pop("cost alone") == statuses.pop("cost in mlp") == "info"
    assert set(statuses.values()) == {"pass"} and len(statuses) == 13, statuses
    assert "**PASS**: 13 pass, 0 wrong, 0 unsupported, 1 skip, 2 info" in card


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(OPS))
def test_our_ops_pass_their_cards(op, tmp_path):
    assert main([op, "--quick", "--out", str(tmp_path)]) == 0
    card = (tmp_path / "opcheck.md").read_text()
    assert "| wrong |" not in card and "**PASS**" in card
