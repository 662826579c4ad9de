"""`python -m fitting.bench allocators`: the cnn's step time and peak RSS under each allocator.

For each allocator policy and batch size: custom and builtin step times alternated in one
process (torch.utils.benchmark medians, a side-by-side ratio), and each impl's peak RSS in a
fresh process of its own. The app's default policy (fitting/train/allocator.py) is the one
meeting both rules at batch 1024: custom peak RSS <= builtin's, custom CPU time per step
<= 1.15x builtin's.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fitting.bench.child_env import BENCH_POLICIES, run_child
from fitting.bench.memory_sweep import IMPLS, mib
from fitting.bench.report import DOC, ROOT, machine, write_csv, write_section
from fitting.train.allocator import DEFAULT_POLICY

BATCHES = (64, 1024)
RULE_BATCH = 1024
MAX_TIME_RATIO = 1.15
# Steps whose CPU time a memory point averages: enough to steady the per-step figure.
CPU_STEPS = 8


def measure(policy: str, batch: int, rounds: int, min_run_time: float) -> dict:
    """Step times (side by side) and each impl's peak RSS (fresh processes) at `batch`."""
    timing = ["time", "--batch", str(batch), "--rounds", str(rounds)]
    times = run_child("fitting.bench.cnn_step", [*timing, "--min-run-time", str(min_run_time)],
                      policy)  # fmt: skip
    row = {"policy": policy, "batch": batch, "allocator": times["allocator"]}
    for impl in IMPLS:
        point = run_child("fitting.bench.cnn_step", ["memory", "--impl", impl, "--batch",
                                                     str(batch), "--steps", str(CPU_STEPS)],
                          policy)
        row[f"{impl}_ms"] = times[f"{impl}_ms"]
        row[f"{impl}_rss"] = point["rss_peak_bytes"]
        row[f"{impl}_rss_above_start"] = point["rss_peak_bytes"] - point["rss_start_bytes"]
        row[f"{impl}_cpu_ms"], row[f"{impl}_faults"] = point["cpu_ms"], point["faults"]
    row["time_ratio"] = row["custom_ms"] / row["builtin_ms"]
    row["cpu_ratio"] = row["custom_cpu_ms"] / row["builtin_cpu_ms"]
    row["rss_ratio"] = row["custom_rss"] / row["builtin_rss"]
    print(f"  {policy:9} batch {batch:5}: time {row['time_ratio']:.3f}x, "
          f"CPU {row['cpu_ratio']:.3f}x, "
          f"RSS {row['rss_ratio']:.3f}x", file=sys.stderr)
    return row


def meets_rules(rows: list[dict], policy: str) -> bool | None:
    """Whether `policy` meets both rules at RULE_BATCH (None if not measured there)."""
    row = next((r for r in rows if r["policy"] == policy and r["batch"] == RULE_BATCH), None)
    if row is None:
        return None
    return row["custom_rss"] <= row["builtin_rss"] and row["cpu_ratio"] <= MAX_TIME_RATIO


def verdict(rows: list[dict]) -> str:
    """Which measured policies meet both rules at RULE_BATCH, and whether the default does."""
    policies = dict.fromkeys(r["policy"] for r in rows)
    meeting = [p for p in policies if meets_rules(rows, p)]
    rules = (f"at batch {RULE_BATCH}, custom peak RSS <= builtin's and custom CPU time per "
             f"step <= {MAX_TIME_RATIO}x builtin's (the step is single-threaded, so its CPU "
             "time is its step time without the waits for a busy machine's cores, which make "
             "wall-time ratios swing by ±0.2 from run to run)")  # fmt: skip
    default = meets_rules(rows, DEFAULT_POLICY)
    said = {True: "meets them", False: "does NOT meet them", None: "was not measured"}[default]
    return (f"Rules: {rules}. Met by: {', '.join(meeting) or 'none'}. The app's default "
            f"(allocator={DEFAULT_POLICY}) {said}.")


def table(rows: list[dict]) -> str:
    """Markdown: one row per policy × batch."""
    lines = [
        "| allocator | batch | custom ms | builtin ms | time × | peak RSS custom MiB "
        "| builtin MiB | RSS × | CPU ms/step custom | builtin | CPU × | page faults/step "
        "custom | builtin | meets rules |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ok = meets_rules(rows, r["policy"]) if r["batch"] == RULE_BATCH else None
        name = r["policy"] + (" (app default)" if r["policy"] == DEFAULT_POLICY else "")
        lines.append(
            f"| {name} | {r['batch']} | {r['custom_ms']:.1f} | {r['builtin_ms']:.1f} | "
            f"{r['time_ratio']:.3f} | {mib(r['custom_rss'])} | {mib(r['builtin_rss'])} | "
            f"{r['rss_ratio']:.3f} | {r['custom_cpu_ms']:.0f} | {r['builtin_cpu_ms']:.0f} | "
            f"{r['cpu_ratio']:.3f} | "
            f"{r['custom_faults']:,} | {r['builtin_faults']:,} | "
            f"{'' if ok is None else 'yes' if ok else 'no'} |"
        )
    return "\n".join(lines)


def csv_rows(rows: list[dict]) -> list[dict]:
    """One CSV row per policy × batch × impl × metric."""
    out = []
    for r in rows:
        context = machine("cpu", r["allocator"], threads=1)
        for impl in IMPLS:
            for metric, key in (("step_ms", "ms"), ("rss_peak_bytes", "rss"),
                                ("rss_above_start_bytes", "rss_above_start"),
                                ("cpu_ms", "cpu_ms"), ("page_faults", "faults")):  # fmt: skip
                value = r[f"{impl}_{key}"]
                out.append({"suite": "allocators", "op": "cnn training step",
                            "size": f"batch={r['batch']}", "impl": impl, "metric": metric,
                            "median": value, "p20": value, "p80": value, **context})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    """CLI: measure every policy, print the table, write the CSV and the docs section."""
    parser = argparse.ArgumentParser(prog="python -m fitting.bench allocators",
                                     description=__doc__)  # fmt: skip
    parser.add_argument("--policies", default=",".join(BENCH_POLICIES))
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--rounds", type=int, default=3, help="custom/builtin alternations")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per round")
    parser.add_argument("--csv", type=Path, default=ROOT / "docs" / "bench_allocators.csv")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update")
    args = parser.parse_args(argv)
    rows, skipped = [], []
    for policy in args.policies.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            try:
                rows.append(measure(policy, batch, args.rounds, args.min_run_time))
            except ValueError as err:  # not installed here
                skipped.append(f"- {policy}: skipped, {err}")
                break
    context = machine("cpu", "per row", threads=1)
    report = (f"cnn training step (channels 8, 16; 32x32; adam), cpu, 1 thread, torch "
              f"{context['torch']}, {context['cpu']}; time × = custom/builtin step time, "
              f"alternated in one process; RSS, CPU time and (minor) page faults per step "
              f"in a fresh process per impl\n\n{table(rows)}"
              f"\n\n{verdict(rows)}\n\n" + "\n".join(skipped))  # fmt: skip
    print(report)
    write_csv(args.csv, csv_rows(rows))
    command = "python -m fitting.bench allocators " + shlex.join(argv or [])
    write_section(args.doc, "allocators", command.strip(), report)
    print(f"\nwritten: {args.csv}, {args.doc}")
