"""The cards docs/ops.md shows are the ones the card prints (the compile row aside: the tests
skip torch.compile for time)."""

import re
from pathlib import Path

import pytest

from fitting.opcheck.cli import main

DOC = (Path(__file__).resolve().parents[2] / "docs" / "ops.md").read_text()
CARDS = re.findall(r"```\n\$ python -m fitting\.opcheck ([^\n]+)\n(.+?)\n```", DOC, re.DOTALL)


def test_the_doc_shows_the_cards_of_the_tutorials_myrelu_and_of_an_ste():
    assert [argv.split()[1] for argv, _ in CARDS][:2] == ["tutorial_ops:MyReLU", "ste:RoundSTE"]


@pytest.mark.parametrize(("argv", "printed"), CARDS, ids=[a.split()[1] for a, _ in CARDS])
def test_a_card_in_the_doc_is_as_printed(argv, printed, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "examples"))
    main([*argv.split(), "--no-compile"])
    out = capsys.readouterr().out.splitlines()
    want = printed.splitlines()
    assert [line for line in out if not line.startswith("compiles")] == \
        [line for line in want if not line.startswith("compiles")]
