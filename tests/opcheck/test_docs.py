"""The cards docs/ops.md shows are the ones the card prints: every line but the compile row (the
tests skip torch.compile for time) and the cost row (timings vary); the trains-the-same row up
to its verdict (the final losses' last digits may vary across CPUs), identical read as the same
within the seed spread. `python docs/regen.py` rewrites the cards from the commands."""

import shlex
from pathlib import Path

import pytest

from docs.regen import quoted
from fitting.opcheck.cli import main

CARD = "python -m fitting.opcheck "
DOC = (Path(__file__).resolve().parents[2] / "docs" / "ops.md").read_text()
CARDS = [(command.removeprefix(CARD), printed) for command, printed in quoted(DOC)
         if command.startswith(CARD)]


# Whether two ops' loss curves are bit-identical depends on the CPU's kernels (MyReLU against
# torch.relu: identical on one AVX-512 Xeon, the same within the seed spread on another): both
# pass, and docs/ops.md says either may print.
SAME = ("identical: every seed's curve is the reference's", "the same within the seed spread")


def _comparable(lines: list[str]) -> list[str]:
    return [line.split(";")[0].replace(*SAME) if line.startswith("trains the same") else line
            for line in lines if not line.startswith(("compiles", "cost"))]


def test_the_doc_shows_the_cards_the_issues_name():
    assert [shlex.split(argv)[1] for argv, _ in CARDS][:6] == [
        "custom", "tutorial_ops:MyReLU", "ste:RoundSTE",
        "{_target_:torch.nn.functional.gelu,_partial_:true,approximate:tanh}",
        "tests.opcheck.user_ops:ReLUGradOver100", "tutorial_ops:SinhBad"]


@pytest.mark.parametrize(("argv", "printed"), CARDS, ids=[a.split()[1] for a, _ in CARDS])
def test_a_card_in_the_doc_is_as_printed(argv, printed, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "examples"))
    main([*shlex.split(argv), "--no-compile"])
    assert _comparable(capsys.readouterr().out.splitlines()) == \
        _comparable(printed.splitlines())
