"""What the benchmarks share: a timer, the machine line, markdown tables, and writing a section."""

import argparse
import os
import platform
import re
import shlex
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def medians_ms(fns: dict[str, Callable[[], object]], min_run_time: float,
               rounds: int = 3) -> dict[str, float]:
    """Median milliseconds of one call of each fn, by torch.utils.benchmark (1 thread, CUDA
    synced), the fns measured in alternating rounds so that drift in the load hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm-up: lazy init, allocator caches, compilation
    for _ in range(rounds):
        for name, fn in fns.items():
            m = Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time)
            times[name] += m.times
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def machine(device: str) -> str:
    """One line naming what the numbers were measured on."""
    where = torch.cuda.get_device_name(device) if device.startswith("cuda") else (
        f"{platform.processor() or platform.machine()}, timed on 1 thread")
    load = f", load {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else ""
    return f"torch {torch.__version__}, {device} ({where}){load}"


def table(header: Sequence[str], rows: list[Sequence[object]]) -> str:
    """A markdown table; floats with 4 significant digits, the first column left-aligned."""
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in rows]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def write_section(name: str, argv: Sequence[str], text: str, doc: Path = DOC) -> None:
    """Replace the `<!-- bench:NAME -->` section of `doc` (or append one): command and text."""
    command = shlex.join(["python", "-m", f"fitting.bench.{name}", *argv])
    section = f"<!-- bench:{name} -->\nProduced by `{command}`:\n\n{text}\n<!-- /bench:{name} -->"
    old = doc.read_text() if doc.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", re.S)
    new = pattern.sub(lambda _: section, old) if pattern.search(old) else f"{old}\n{section}\n"
    doc.write_text(new)


def main(name: str, doc: str, run: Callable[[str, bool], str], argv: Sequence[str] | None = None,
         out: Path = DOC) -> str:
    """A benchmark's command line: print its table; --write puts it in docs/benchmarks.md."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog=f"python -m fitting.bench.{name}", description=doc)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes, short timings")
    p.add_argument("--write", action="store_true", help=f"update its section of {DOC.name}")
    args = p.parse_args(argv)
    text = run(args.device, args.quick)
    print(text)
    if args.write:
        write_section(name, argv, text, out)
    return text
