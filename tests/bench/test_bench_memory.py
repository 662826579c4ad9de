"""`python -m fitting.bench memory`: the sweep's arithmetic, its PNG, CSV and docs section, one
point in a fresh process, and the command end to end at tiny sizes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fitting.bench import memory_sweep
from fitting.bench.cli import main as bench_main
from fitting.bench.memory_sweep import largest_fitting, points_table, targets
from fitting.bench.report import malloc_note

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def point(impl: str, batch: int, tensor_mib: float, rss_mib: float) -> dict:
    """A sweep point as cnn_step reports it (the process started at 300 MiB)."""
    return {"impl": impl, "batch": batch, "tensor_peak_bytes": int(tensor_mib * MIB),
            "rss_start_bytes": 300 * MIB, "rss_peak_bytes": int((300 + rss_mib) * MIB),
            "step_ms": 1.0, "malloc": "test"}  # fmt: skip


# Memory linear in the batch: custom 0.125 MiB per image, builtin 0.15.
POINTS = [
    point(impl, b, per * b, per * b * 1.2)
    for b in (64, 256, 1024)
    for impl, per in (("custom", 0.125), ("builtin", 0.15))
]


def test_largest_fitting_batch_measured_and_by_a_straight_line():
    values = {64: 8 * MIB, 256: 32 * MIB, 1024: 128 * MIB}
    assert largest_fitting(values, 100 * MIB) == (256, 800)
    assert largest_fitting(values, 4 * MIB) == (None, 32)
    assert largest_fitting({64: 5}, 10) == (64, None)


def test_targets_at_batch_1024():
    checks = targets(POINTS, "cpu")
    assert checks == [
        ("tensor peak custom/builtin <= 0.8x", "0.833x", False),
        ("peak RSS custom <= builtin", "453.6 vs 484.3 MiB (0.937x)", True),
    ]
    assert targets(POINTS, "cuda")[0][0] == "tensor peak custom/builtin <= 0.65x"
    assert targets(POINTS[:2], "cpu") == []


def test_points_table_rows_and_ratios():
    rows = points_table(POINTS).splitlines()
    assert len(rows) == 2 + 3
    assert rows[-1].startswith("| 1024 | 128.0 | 153.6 | 0.833 | 153.6 | 184.3 | 0.833 | 453.6 |")


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "sweep.png"
    memory_sweep.plot(POINTS, 100.0, path, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_exit_cleanly(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_main(["memory", "--batches", "64,x"])
    assert exit_info.value.code == 2
    assert "--batches must be comma-separated integers, got '64,x'" in capsys.readouterr().err


def test_cnn_step_point_in_a_fresh_process():
    cmd = [sys.executable, "-m", "fitting.bench.cnn_step", "memory", "--impl", "custom",
           "--batch", "8", "--steps", "1"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["tensor_peak_bytes"] > 8 * 8 * 32 * 32 * 4  # layer 1's output at batch 8
    assert result["rss_peak_bytes"] >= result["rss_start_bytes"] > 0
    assert result["cpu_ms"] > 0 and result["faults"] >= 0
    assert result["malloc"] == malloc_note()  # the child inherits this process's environment


@pytest.mark.slow
def test_memory_command_end_to_end(tmp_path):
    paths = {"png": tmp_path / "sweep.png", "csv": tmp_path / "m.csv", "doc": tmp_path / "b.md"}
    args = ["memory", "--batches", "4,8", "--steps", "1", "--budget-mb", "50"]
    args += [x for key, path in paths.items() for x in (f"--{key}", str(path))]
    out = subprocess.run([sys.executable, "-m", "fitting.bench", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader(paths["csv"].open()))
    assert len(rows) == 2 * 2 * 4  # batches x impls x metrics
    assert {r["metric"] for r in rows} == {"tensor_peak_bytes", "rss_above_start_bytes",
                                           "rss_peak_bytes", "step_ms"}  # fmt: skip
    doc = paths["doc"].read_text()
    assert "<!-- bench:memory -->" in doc and "Largest batch within a 50 MiB budget" in doc
    assert f"Produced by `python -m fitting.bench {' '.join(args)}`" in doc
