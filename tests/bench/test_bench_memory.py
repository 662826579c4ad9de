"""`python -m fitting.bench memory` and `... allocators`: the sweep's arithmetic, its PNG, CSV
and docs section, and both commands end to end at tiny sizes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fitting.bench import memory_sweep
from fitting.bench.allocators import meets_rules, verdict
from fitting.bench.allocators import table as allocator_table
from fitting.bench.child_env import BENCH_POLICIES, env_for
from fitting.bench.cli import main as bench_main
from fitting.bench.memory_sweep import largest_fitting, points_table, targets

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def point(impl: str, batch: int, tensor_mib: float, rss_mib: float) -> dict:
    """A sweep point as cnn_step reports it (the process started at 300 MiB)."""
    return {"impl": impl, "batch": batch, "tensor_peak_bytes": int(tensor_mib * MIB),
            "rss_start_bytes": 300 * MIB, "rss_peak_bytes": int((300 + rss_mib) * MIB),
            "step_ms": 1.0, "allocator": "test"}  # fmt: skip


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


def test_allocator_rules():
    def row(policy, batch, c_ms, c_rss, b_rss):
        return {"policy": policy, "batch": batch, "allocator": "x", "custom_ms": c_ms,
                "builtin_ms": 100.0, "time_ratio": c_ms / 100.0, "custom_rss": c_rss,
                "builtin_rss": b_rss, "rss_ratio": c_rss / b_rss, "custom_rss_above_start": 1,
                "builtin_rss_above_start": 1, "custom_cpu_ms": c_ms, "builtin_cpu_ms": 100.0,
                "cpu_ratio": c_ms / 100.0, "custom_faults": 1200,
                "builtin_faults": 1000}  # fmt: skip

    rows = [row("default", 1024, 102.0, 575, 546), row("mmap", 64, 130.0, 10, 9),
            row("mmap", 1024, 108.0, 468, 493), row("tuned", 1024, 120.0, 400, 500)]
    assert [meets_rules(rows, p) for p in ("default", "mmap", "tuned", "mimalloc")] == [
        False, True, False, None]  # fmt: skip
    lines = allocator_table(rows).splitlines()
    assert lines[3].startswith("| mmap (app default) | 64 |") and lines[3].endswith("|  |")
    assert lines[4].endswith("| 108 | 100 | 1.080 | 1,200 | 1,000 | yes |")
    assert lines[5].endswith("| no |")
    assert verdict(rows).endswith("Met by: mmap. The app's default (allocator=mmap) meets them.")


def test_child_env_for_each_policy():
    assert "LD_PRELOAD" not in env_for("mmap") or "mimalloc" not in env_for("mmap")["LD_PRELOAD"]
    assert "libmimalloc" in env_for("mimalloc")["LD_PRELOAD"]
    assert set(BENCH_POLICIES) >= {"default", "mmap", "tuned", "mimalloc"}
    with pytest.raises(ValueError, match="env_for: policy must be one of default, mmap"):
        env_for("fastest")


def test_bad_arguments_exit_cleanly(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_main(["memory", "--batches", "64,x"])
    assert exit_info.value.code == 2
    assert "--batches must be comma-separated integers, got '64,x'" in capsys.readouterr().err


def test_cnn_step_point_in_a_fresh_process():
    cmd = [sys.executable, "-m", "fitting.bench.cnn_step", "memory", "--impl", "custom",
           "--batch", "8", "--steps", "1", "--allocator", "mmap"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, env=env_for("mmap"), capture_output=True, text=True,
                         check=True)  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["tensor_peak_bytes"] > 8 * 8 * 32 * 32 * 4  # layer 1's output at batch 8
    assert result["rss_peak_bytes"] >= result["rss_start_bytes"] > 0
    assert result["cpu_ms"] > 0 and result["faults"] >= 0
    assert "allocator=mmap" in result["allocator"]
    assert "profiler" not in out.stderr.lower() and "USDT" not in out.stderr


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


@pytest.mark.slow
def test_allocators_command_end_to_end(tmp_path):
    csv_path, doc = tmp_path / "a.csv", tmp_path / "b.md"
    args = ["allocators", "--policies", "default,mmap", "--batches", "4", "--rounds", "1",
            "--min-run-time", "0.05", "--csv", str(csv_path), "--doc", str(doc)]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "fitting.bench", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 2 * 2 * 5  # policies x impls x metrics
    assert {r["allocator"].split("malloc, ")[-1] for r in rows} == {
        "allocator=default (default thresholds)", "allocator=mmap (mallopt mmap/trim (4194304, 268435456))"
    }
    assert "| mmap (app default) | 4 |" in doc.read_text()
