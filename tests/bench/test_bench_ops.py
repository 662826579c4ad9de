"""`python -m fitting.bench` (the op suites): rows, the markdown table, the CSV rows and the
docs section it writes."""

from __future__ import annotations

import csv

import pytest

from fitting.bench import conv_bn as bench_conv_bn
from fitting.bench.cli import csv_rows, format_table
from fitting.bench.report import (
    CSV_COLUMNS,
    machine,
    malloc_note,
    quantiles,
    write_csv,
    write_section,
)

ROW_KEYS = [
    "name",
    "custom_ms",
    "builtin_ms",
    "time_ratio",
    "custom_bytes",
    "builtin_bytes",
    "bytes_ratio",
    "target",
    "custom_p20_ms",
    "custom_p80_ms",
    "builtin_p20_ms",
    "builtin_p80_ms",
]


@pytest.fixture(scope="module")
def conv_rows():
    """bench_fused_conv_bn's rows at a tiny size."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {"N": 4, "C_IN": 4, "C_OUT": 8, "HW": 8, "CNN_BLOCKS": 2}.items():
            mp.setattr(bench_conv_bn, name, value)
        return bench_conv_bn.bench_fused_conv_bn("cpu", quick=True)


def test_benchmark_rows(conv_rows):
    """Keys, ratios, percentiles around the median."""
    assert [list(r) for r in conv_rows] == [ROW_KEYS, ROW_KEYS]
    assert conv_rows[0]["bytes_ratio"] <= 0.4 and conv_rows[1]["bytes_ratio"] < 1
    assert all(r["time_ratio"] > 0 for r in conv_rows)
    for r in conv_rows:
        for impl in ("custom", "builtin"):
            assert r[f"{impl}_p20_ms"] <= r[f"{impl}_ms"] <= r[f"{impl}_p80_ms"]
    assert "custom ms" in format_table(conv_rows)


def test_csv_has_one_row_per_op_impl_size_metric(conv_rows, tmp_path):
    rows = csv_rows([{"suite": "conv_bn", **r} for r in conv_rows], machine("cpu"))
    assert len(rows) == len(conv_rows) * 2 * 2  # impls x (time_ms, saved_bytes)
    path = tmp_path / "bench.csv"
    write_csv(path, rows)
    read = list(csv.DictReader(path.open()))
    assert tuple(read[0]) == CSV_COLUMNS
    first = read[0]
    assert (first["suite"], first["op"], first["impl"], first["metric"]) == (
        "conv_bn", "fused_conv_bn2d", "custom", "time_ms"
    )
    assert first["size"].startswith("train fwd+bwd N=4")
    assert float(first["p20"]) <= float(first["median"]) <= float(first["p80"])
    assert first["torch"] and first["cpu"] and int(first["threads"]) >= 1
    saved = [r for r in read if r["metric"] == "saved_bytes"]
    assert all(r["median"] == r["p20"] == r["p80"] for r in saved)


def test_quantiles():
    assert quantiles([3.0]) == (3.0, 3.0, 3.0)
    median, p20, p80 = quantiles([float(x) for x in range(1, 11)])
    assert (median, p20, p80) == (5.5, pytest.approx(2.8), pytest.approx(8.2))


def test_write_section_replaces_only_its_own_section(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nHand-written intro.\n")
    write_section(doc, "ops", "python -m fitting.bench", "| a |\n|---|\n| 1 |")
    write_section(doc, "memory", "python -m fitting.bench memory", "table M")
    doc.write_text(doc.read_text() + "\nHand-written outro.\n")
    write_section(doc, "ops", "python -m fitting.bench --quick", "| a |\n|---|\n| 2 |")
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nHand-written intro.\n")
    assert text.endswith("Hand-written outro.\n")
    assert "| 2 |" in text and "| 1 |" not in text and "table M" in text
    assert text.count("<!-- bench:ops -->") == 1 and text.count("<!-- /bench:ops -->") == 1
    assert "Produced by `python -m fitting.bench --quick`" in text


def test_malloc_note_names_what_changes_malloc(monkeypatch):
    for key in ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"):
        monkeypatch.delenv(key, raising=False)
    assert malloc_note().endswith("malloc as shipped")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert malloc_note().endswith("malloc, changed by MALLOC_ARENA_MAX=2")
