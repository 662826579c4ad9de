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


def test_docs_show_three_kinds_of_op_and_the_tutorial_ops():
    doc = (ROOT / "docs" / "ops.md").read_text()
    for title in ("ops.activation=swish:Swish", "ops.activation=leaky:leaky_relu(negative_slope=0.1)",
                  "any layer_norm:layer_norm", "ops.activation=tutorial_ops:MyReLU",
                  "ops.legendre_p3=tutorial_ops:LegendrePolynomial3"):  # fmt: skip
        assert f"### opcheck: `{title}`" in doc, title
    for name in ("swish.py", "leaky.py", "layer_norm.py", "tutorial_ops.py"):
        assert (ROOT / "docs" / "examples" / name).is_file()
