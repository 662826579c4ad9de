"""Each benchmark runs at tiny sizes, prints its markdown table and rewrites only its section."""

import pytest

from fitting.bench import cnn, ops


@pytest.mark.parametrize(("module", "rows"), [(ops, 6), (cnn, 3)])
def test_a_quick_run_prints_its_table_and_replaces_its_section(module, rows, tmp_path):
    name = module.__name__.rsplit(".", 1)[1]
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nintro\n\n<!-- bench:{name} -->\nold\n<!-- /bench:{name} -->"
                   "\n\n<!-- bench:other -->\nkept\n<!-- /bench:other -->\n")
    text = module.main(["--quick", "--device", "cpu", "--write"], doc=doc)
    assert len([line for line in text.splitlines() if line.startswith("| ")]) == 1 + rows
    written = doc.read_text()
    assert written.startswith("# Benchmarks\n\nintro\n") and "kept" in written
    assert "old" not in written and written.count(f"<!-- bench:{name} -->") == 1
    assert f"Produced by `python -m fitting.bench.{name} --quick --device cpu --write`" in written
    assert text in written
