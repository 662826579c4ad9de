"""`python -m fitting.bench [memory] ...`: the benchmarks, written to docs/benchmarks.md.

Without a sub-command: custom ops vs built-in twins, time and saved bytes, measured side by
side in this process, with glibc malloc as shipped. `memory`: peak memory of the cnn's training
step against batch size (fitting/bench/memory_sweep.py). Each writes its tables into its own
section of docs/benchmarks.md and a CSV beside it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from fitting.bench import memory_sweep
from fitting.bench.conv_bn import bench_fused_conv_bn
from fitting.bench.ops import bench_ops
from fitting.bench.report import DOC, ROOT, machine, malloc_note, write_csv, write_section

SUITES = {"ops": bench_ops, "conv_bn": bench_fused_conv_bn}
SUBCOMMANDS = {"memory": memory_sweep.main}


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


def main(argv: list[str] | None = None) -> None:
    """CLI: a sub-command, or the op suites measured here, printed and written to the docs."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        SUBCOMMANDS[argv[0]](argv[1:])
        return
    parser = argparse.ArgumentParser(prog="python -m fitting.bench", description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", default="ops,conv_bn", help="suites: ops, conv_bn")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--csv", type=Path, default=ROOT / "docs" / "bench_ops.csv")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update")
    args = parser.parse_args(argv)
    suites = args.only.split(",")
    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        parser.error(f"--only: unknown suite(s) {unknown}; choose from {sorted(SUITES)}")
    rows = measure(args.device, suites, args.quick)
    context = machine(args.device)
    header = (
        f"torch {context['torch']}, {context['threads']} threads, {context['cpu']}, device "
        f"{args.device}, {malloc_note()}; medians of torch.utils.benchmark, custom and builtin "
        "alternated in one process"
    )
    report = f"{header}\n\n{format_table(rows)}"
    print(report)
    write_csv(args.csv, csv_rows(rows, context))
    write_section(args.doc, "ops", f"python -m fitting.bench {shlex.join(argv)}".strip(), report)
    print(f"\nwritten: {args.csv}, {args.doc}")


if __name__ == "__main__":
    main()
