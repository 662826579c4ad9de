"""`python -m fitting.bench memory`: peak memory of a cnn training step against batch size.

Each point (impl × batch size) runs in a fresh process (fitting/bench/cnn_step.py) on glibc
malloc as shipped, since a process's peak RSS never goes down. It reports the
step's tensor peak (above what was live at its start; CUDA: max_memory_allocated) and the peak
RSS, above the process's before training and in all; plots both against batch size into a PNG
with the largest batch that fits `--budget-mb`; checks the targets at batch 1024.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from fitting.bench.report import DOC, ROOT, machine, write_csv, write_section

MIB = 1 << 20
NOTE = """\
Tensor peak: the most tensor bytes a training step had allocated at once above those live at its
start (CPU: the allocation records of `torch.autograd.profiler.profile(profile_memory=True)`;
CUDA: `torch.cuda.max_memory_allocated`). Peak RSS: the process's resident-memory high-water
mark (VmHWM). A training run logs the same two as `memory/peak_bytes`, on sampled steps only
since profiling a step costs milliseconds (the first logged step after step 0, then the first
logged step from each multiple of `log.memory_every`, default 1000), and
`memory/peak_rss_bytes` at every logged step; both are in the end-of-run summary and in
`python -m fitting.compare`'s table."""
BATCHES = (64, 128, 256, 512, 1024, 2048)
IMPLS = ("custom", "builtin")
TARGET_BATCH = 1024
# custom/builtin tensor peak at TARGET_BATCH: the conv-BN op's recompute must show in it.
TARGET_RATIO = {"cpu": 0.8, "cuda": 0.65}
METRICS = {  # CSV metric -> what a point reports
    "tensor_peak_bytes": lambda p: p["tensor_peak_bytes"],
    "rss_above_start_bytes": lambda p: p["rss_peak_bytes"] - p["rss_start_bytes"],
    "rss_peak_bytes": lambda p: p["rss_peak_bytes"],
}


def run_point(args: list[str]) -> dict:
    """Run `python -m fitting.bench.cnn_step *args` in a fresh process; the JSON it prints.

    RuntimeError when the child fails."""
    cmd = [sys.executable, "-m", "fitting.bench.cnn_step", *args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{shlex.join(cmd[1:])} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sweep(batches: list[int], device: str, steps: int) -> list[dict]:
    """One measured point per impl and batch size, each from a fresh process."""
    points = []
    for batch in batches:
        for impl in IMPLS:
            args = ["memory", "--impl", impl, "--batch", str(batch), "--device", device]
            point = run_point([*args, "--steps", str(steps)])
            points.append(point)
            print(f"  {impl:7} batch {batch:5}: tensor peak {mib(point['tensor_peak_bytes'])} MiB,"
                  f" peak RSS {mib(point['rss_peak_bytes'])} MiB", file=sys.stderr)
    return points


def mib(nbytes: float) -> str:
    """Bytes as MiB with one decimal."""
    return f"{nbytes / MIB:,.1f}"


def by_impl(points: list[dict], metric: str) -> dict[str, dict[int, int]]:
    """impl -> batch -> value of `metric` (a METRICS key)."""
    out: dict[str, dict[int, int]] = {impl: {} for impl in IMPLS}
    for p in points:
        out[p["impl"]][p["batch"]] = METRICS[metric](p)
    return out


def largest_fitting(values: dict[int, int], budget: int) -> tuple[int | None, int | None]:
    """(largest measured batch whose value fits `budget`, the batch a straight-line fit of the
    points through the budget gives), None where none fits or the fit does not grow."""
    fitting = [b for b, v in values.items() if v <= budget]
    batches = sorted(values)
    estimate = None
    if len(batches) >= 2:
        n = len(batches)
        mean_b, mean_v = sum(batches) / n, sum(values[b] for b in batches) / n
        cov = sum((b - mean_b) * (values[b] - mean_v) for b in batches)
        slope = cov / sum((b - mean_b) ** 2 for b in batches)
        if slope > 0:
            estimate = max(0, int((budget - (mean_v - slope * mean_b)) / slope))
    return (max(fitting) if fitting else None), estimate


def points_table(points: list[dict]) -> str:
    """Markdown: per batch, each impl's tensor peak and RSS, and the custom/builtin ratios."""
    lines = [
        "| batch | tensor peak custom MiB | builtin MiB | × | RSS above start custom MiB "
        "| builtin MiB | × | peak RSS custom MiB | builtin MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    tensor, grown, rss = (by_impl(points, m) for m in METRICS)
    for b in sorted(tensor["custom"]):
        c, bt = tensor["custom"][b], tensor["builtin"][b]
        gc, gb = grown["custom"][b], grown["builtin"][b]
        lines.append(
            f"| {b} | {mib(c)} | {mib(bt)} | {c / bt:.3f} | {mib(gc)} | {mib(gb)} | "
            f"{gc / gb:.3f} | {mib(rss['custom'][b])} | {mib(rss['builtin'][b])} |"
        )
    return "\n".join(lines)


def budget_lines(points: list[dict], budget_mb: float) -> str:
    """The largest batch within the budget per impl, by tensor peak and by RSS above start."""
    budget = int(budget_mb * MIB)
    lines = [f"Largest batch within a {budget_mb:g} MiB budget (measured; straight-line fit):"]
    for metric, what in (("tensor_peak_bytes", "tensor peak"),
                         ("rss_above_start_bytes", "RSS above start")):  # fmt: skip
        for impl, values in by_impl(points, metric).items():
            measured, estimate = largest_fitting(values, budget)
            lines.append(f"- {what}, {impl}: {measured or 'none'} ({estimate or 'n/a'})")
    return "\n".join(lines)


def targets(points: list[dict], device: str) -> list[tuple[str, str, bool]]:
    """(target, measured, met) at TARGET_BATCH, if it was measured."""
    tensor = by_impl(points, "tensor_peak_bytes")
    rss = by_impl(points, "rss_peak_bytes")
    if TARGET_BATCH not in tensor["custom"]:
        return []
    ratio = tensor["custom"][TARGET_BATCH] / tensor["builtin"][TARGET_BATCH]
    limit = TARGET_RATIO.get(device.split(":")[0], TARGET_RATIO["cpu"])
    rc, rb = rss["custom"][TARGET_BATCH], rss["builtin"][TARGET_BATCH]
    return [
        (f"tensor peak custom/builtin <= {limit}x", f"{ratio:.3f}x", ratio <= limit),
        ("peak RSS custom <= builtin", f"{mib(rc)} vs {mib(rb)} MiB ({rc / rb:.3f}x)", rc <= rb),
    ]


def plot(points: list[dict], budget_mb: float, path: Path, title: str) -> None:
    """Tensor peak and RSS above start against batch size, both impls, and the budget line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    panels = (("tensor_peak_bytes", "tensor peak per step"),
              ("rss_above_start_bytes", "peak RSS above the process's start"))  # fmt: skip
    for ax, (metric, label) in zip(axes, panels, strict=True):
        for impl, values in by_impl(points, metric).items():
            batches = sorted(values)
            line = ax.plot(batches, [values[b] / MIB for b in batches], "o-", label=impl)[0]
            fits, _ = largest_fitting(values, int(budget_mb * MIB))
            if fits:
                ax.plot([fits], [values[fits] / MIB], "*", ms=14, color=line.get_color())
        ax.axhline(budget_mb, color="gray", ls="--", label=f"budget {budget_mb:g} MiB")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MiB")
    axes[0].legend(title="★ largest batch within budget")
    fig.suptitle(textwrap.fill(title, 130), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def csv_rows(points: list[dict], device: str, context: dict) -> list[dict]:
    """One CSV row per impl × batch × metric (one measurement: median = p20 = p80)."""
    rows = []
    for p in points:
        values = {**{m: f(p) for m, f in METRICS.items()}, "step_ms": p["step_ms"]}
        for metric, value in values.items():
            rows.append({"suite": "memory", "op": "cnn training step",
                         "size": f"batch={p['batch']}", "impl": p["impl"], "metric": metric,
                         "median": value, "p20": value, "p80": value, **context})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    """CLI: sweep, print the tables, write the PNG, the CSV and the docs section."""
    parser = argparse.ArgumentParser(prog="python -m fitting.bench memory", description=__doc__)
    parser.add_argument("--budget-mb", type=float, default=300.0)
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=2, help="steps per point after a warm-up")
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "memory_sweep.png")
    parser.add_argument("--csv", type=Path, default=ROOT / "docs" / "bench_memory.csv")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update")
    args = parser.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        parser.error(f"--batches must be comma-separated integers, got {args.batches!r}")
    if args.budget_mb <= 0 or min(batches) < 2:
        parser.error("--budget-mb must be > 0 and every batch >= 2 (batch norm needs 2 images)")
    try:
        points = sweep(batches, args.device, args.steps)
    except RuntimeError as err:
        parser.exit(2, f"python -m fitting.bench memory: error: {err}\n")
    context = machine(args.device, threads=1)
    header = (f"cnn training step (channels 8, 16; 32x32; adam), {args.device}, 1 thread, "
              f"torch {context['torch']}, {context['cpu']}, {points[0]['malloc']}")
    checks = targets(points, args.device)
    check_table = "\n".join(["| target (batch 1024) | measured | met |", "|---|---|---|"]
                            + [f"| {t} | {m} | {'yes' if ok else 'NO'} |" for t, m, ok in checks])
    report = (f"{header}\n\n{NOTE}\n\n{points_table(points)}\n\n"
              f"{budget_lines(points, args.budget_mb)}\n\n"
              f"{check_table if checks else ''}\n\n![memory sweep]({args.png.name})")
    print(report)
    plot(points, args.budget_mb, args.png, header)
    write_csv(args.csv, csv_rows(points, args.device, context))
    command = f"python -m fitting.bench memory {shlex.join(argv or [])}".strip()
    write_section(args.doc, "memory", command, report)
    print(f"\nwritten: {args.png}, {args.csv}, {args.doc}")
