"""What the docs quote `python train.py` printing (its config errors: the same on every CPU) is
what it prints. `python docs/regen.py` rewrites every quoted output; the cards are checked in
tests/opcheck/test_docs.py."""

import shlex
from pathlib import Path

import pytest

from docs.regen import quoted
from tests.train.helpers import results  # noqa: F401  (imports the app: its config schema)

REPO = Path(__file__).resolve().parents[1]
RUNS = [(doc.name, command, printed)
        for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for command, printed in quoted(doc.read_text()) if "python train.py " in command]


def test_the_docs_quote_train_py():
    assert {doc for doc, _, _ in RUNS} == {"operations.md", "ops.md"}


@pytest.mark.parametrize(("doc", "command", "printed"), RUNS, ids=[c for _, c, _ in RUNS])
def test_a_quoted_run_prints_what_the_doc_shows(doc, command, printed, train_cli, monkeypatch):
    before, args = command.split("python train.py ")
    if "PYTHONPATH=docs/examples" in before:
        monkeypatch.syspath_prepend(str(REPO / "docs" / "examples"))
    done = train_cli(*shlex.split(args))
    assert (done.stdout + done.stderr).rstrip("\n") == printed
