"""docs/ops.md shows the worked example op file as it is (the suite runs its card)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_show_the_example_op_file_verbatim():
    doc = (ROOT / "docs" / "ops.md").read_text()
    source = (ROOT / "docs" / "examples" / "my_relu.py").read_text()
    assert f"```python\n{source}```" in doc


def test_docs_show_the_card_of_each_op():
    doc = (ROOT / "docs" / "ops.md").read_text()
    for op in ("activation", "linear", "legendre_p3", "conv_bn"):
        assert f"### opcheck: `ops.{op}=custom`" in doc
    assert "### opcheck: `ops.activation=my_relu:my_relu`" in doc
