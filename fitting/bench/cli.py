"""`python -m fitting.bench [memory|allocators] ...`: the benchmarks, written to docs/benchmarks.md.

Without a sub-command: custom ops vs built-in twins, time and saved bytes, in one table per
allocator policy, each measured in a fresh process (glibc takes its malloc settings at
start-up; see fitting/train/allocator.py). `memory`: peak memory of the cnn's training step
against batch size (fitting/bench/memory_sweep.py). `allocators`: the cnn's step time and peak
RSS under each allocator policy (fitting/bench/allocators.py). Each writes its tables into its
own section of docs/benchmarks.md and a CSV beside it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch

from fitting.bench import allocators, memory_sweep
from fitting.bench.child_env import run_child
from fitting.bench.conv_bn import bench_fused_conv_bn
from fitting.bench.ops import bench_ops
from fitting.bench.report import DOC, ROOT, machine, write_csv, write_section
from fitting.train.allocator import POLICIES, apply_allocator, describe_allocator

SUITES = {"ops": bench_ops, "conv_bn": bench_fused_conv_bn}
SUBCOMMANDS = {"memory": memory_sweep.main, "allocators": allocators.main}


def measure(device: str, suites: list[str], quick: bool) -> list[dict]:
    """Rows of the chosen suites, measured in this process."""
    rows = []
    for suite in suites:
        rows += [{"suite": suite, **r} for r in SUITES[suite](torch.device(device), quick=quick)]
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


def csv_rows(rows: list[dict], context: dict) -> list[dict]:
    """One CSV row per op × impl × size × metric (time_ms: median, p20, p80; saved_bytes)."""
    out = []
    for r in rows:
        op, _, size = r["name"].partition(" ")
        for impl in ("custom", "builtin"):
            keys = {"suite": r.get("suite", ""), "op": op, "size": size, "impl": impl, **context}
            out.append({**keys, "metric": "time_ms", "median": r[f"{impl}_ms"],
                        "p20": r[f"{impl}_p20_ms"], "p80": r[f"{impl}_p80_ms"]})  # fmt: skip
            nbytes = r[f"{impl}_bytes"]
            out.append({**keys, "metric": "saved_bytes", "median": nbytes, "p20": nbytes,
                        "p80": nbytes})  # fmt: skip
    return out


def _child_args(args: argparse.Namespace) -> list[str]:
    return ["--single", "--json", "--device", args.device, "--only", args.only] + [
        "--quick"
    ] * args.quick


def main(argv: list[str] | None = None) -> None:
    """CLI: a sub-command, or the op benchmark under each allocator policy."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        SUBCOMMANDS[argv[0]](argv[1:])
        return
    parser = argparse.ArgumentParser(prog="python -m fitting.bench", description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", default="ops,conv_bn", help="suites: ops, conv_bn")
    parser.add_argument("--settings", default="default,mmap,tuned",
                        help="allocator policies, each in a fresh process")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--csv", type=Path, default=ROOT / "docs" / "bench_ops.csv")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update")
    parser.add_argument("--single", action="store_true", help="measure in this process only")
    parser.add_argument("--allocator", choices=POLICIES, help="policy to set first (--single)")
    parser.add_argument("--json", action="store_true", help="rows as JSON (--single)")
    args = parser.parse_args(argv)
    suites = args.only.split(",")
    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        parser.error(f"--only: unknown suite(s) {unknown}; choose from {sorted(SUITES)}")
    if args.single:
        if args.allocator:
            apply_allocator(args.allocator)
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
    sections, all_csv = [header], []
    for setting in args.settings.split(","):
        try:
            result = run_child("fitting.bench", _child_args(args), setting)
        except (ValueError, RuntimeError) as err:  # e.g. mimalloc not installed
            sections.append(f"[{setting}] skipped: {err}")
            continue
        sections.append(f"### malloc: {setting} ({result['allocator']})\n\n"
                        f"{format_table(result['rows'])}")  # fmt: skip
        all_csv += csv_rows(result["rows"], machine(args.device, result["allocator"]))
    report = "\n\n".join(sections)
    print(report)
    write_csv(args.csv, all_csv)
    write_section(args.doc, "ops", f"python -m fitting.bench {shlex.join(argv)}".strip(), report)
    print(f"\nwritten: {args.csv}, {args.doc}")


if __name__ == "__main__":
    main()
