"""`python -m fitting.bench`: custom ops vs built-in twins, time and saved bytes, in one table.

Each allocator setting runs in a fresh process (glibc reads its malloc thresholds at start-up):
`default` is glibc's malloc as shipped, `tuned` raises MALLOC_MMAP_THRESHOLD_ and
MALLOC_TRIM_THRESHOLD_ so big activations stop page-faulting (see fitting/allocator.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from fitting.bench.allocator import describe_allocator, env_for, tune_malloc
from fitting.bench.conv_bn import bench_fused_conv_bn
from fitting.bench.ops import bench_ops

ROOT = Path(__file__).resolve().parents[2]
SUITES = {"ops": bench_ops, "conv_bn": bench_fused_conv_bn}


def measure(device: str, suites: list[str], quick: bool) -> list[dict]:
    """Rows of the chosen suites, measured in this process."""
    rows = []
    for suite in suites:
        rows += SUITES[suite](torch.device(device), quick=quick)
    return rows


def format_table(rows: list[dict]) -> str:
    """Rows as a markdown table: times in ms, saved bytes in KiB, ratios custom/builtin."""
    lines = [
        "| benchmark | custom ms | builtin ms | time × "
        "| custom KiB | builtin KiB | bytes × | target |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['custom_ms']:.4g} | {r['builtin_ms']:.4g} | "
            f"{r['time_ratio']:.2f} | {r['custom_bytes'] / 1024:,.0f} | "
            f"{r['builtin_bytes'] / 1024:,.0f} | {r['bytes_ratio']:.3f} | {r['target']} |"
        )
    return "\n".join(lines)


def _run_child(setting: str, args: argparse.Namespace) -> tuple[str, list[dict]]:
    """Measure in a fresh process under allocator `setting`; (allocator line, rows)."""
    env = env_for("default" if setting == "mallopt" else setting)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "fitting.bench", "--single", "--json", "--device", args.device]
    cmd += ["--only", args.only] + ["--quick"] * args.quick + ["--mallopt"] * (setting == "mallopt")
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"benchmark under {setting!r} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["allocator"], result["rows"]


def main(argv: list[str] | None = None) -> None:
    """CLI: run the benchmark under each allocator setting, print and write the tables."""
    parser = argparse.ArgumentParser(prog="python -m fitting.bench", description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", default="ops,conv_bn", help="suites: ops, conv_bn")
    parser.add_argument("--settings", default="default,tuned", help="default,tuned,mallopt,…")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench.md")
    parser.add_argument("--single", action="store_true", help="measure in this process only")
    parser.add_argument("--mallopt", action="store_true", help="tune_malloc() first (--single)")
    parser.add_argument("--json", action="store_true", help="rows as JSON (--single)")
    args = parser.parse_args(argv)
    suites = args.only.split(",")
    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        parser.error(f"--only: unknown suite(s) {unknown}; choose from {sorted(SUITES)}")
    if args.single:
        if args.mallopt:
            tune_malloc()
        rows = measure(args.device, suites, args.quick)
        if args.json:
            print(json.dumps({"allocator": describe_allocator(), "rows": rows}))
        else:
            print(f"allocator: {describe_allocator()}\n{format_table(rows)}")
        return
    header = (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
        "medians of torch.utils.benchmark, custom and builtin alternated in one process"
    )
    sections = [header]
    for setting in args.settings.split(","):
        try:
            allocator, rows = _run_child(setting, args)
        except (ValueError, RuntimeError) as err:  # e.g. jemalloc not installed
            sections.append(f"[{setting}] skipped: {err}")
            continue
        sections.append(f"### malloc: {setting} ({allocator})\n\n{format_table(rows)}")
    report = "\n\n".join(sections)
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
