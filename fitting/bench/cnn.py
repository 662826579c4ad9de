"""The cnn's training step with each conv_bn: tensor peak, bytes saved and step time.

`python -m fitting.bench.cnn [--write]`: CurveCNN (channels 8, 16; 32x32 images; Adam) with
ours (fused_conv_bn2d: recomputes the conv in backward), the twin (conv_bn_reference: keeps
the conv output) and the twin under torch.utils.checkpoint (recomputes the whole pair), in
eager mode; ours and the twin with the model under torch.compile, as `compile=true` runs it.
"""

from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint

from fitting.bench import report
from fitting.bench.report import machine, medians_ms, table
from fitting.track.memory import step_peak
from models.cnn import CurveCNN
from models.ops import conv_bn_reference, fused_conv_bn2d, saved_tensor_bytes

HEADER = ["conv_bn", "batch", "tensor peak MiB", "× twin", "saved MiB", "step ms", "× twin"]


def checkpointed_reference(x, weight, bn_weight, bn_bias, running_mean, running_var, *rest):
    """conv_bn_reference under torch.utils.checkpoint: backward reruns conv and batch norm."""
    calls = []

    def conv_bn(x, weight, bn_weight, bn_bias):
        # checkpoint's recompute calls this again: the running stats must move once only.
        stats = (running_mean, running_var)
        stats = [s.clone() for s in stats] if calls else stats
        calls.append(1)
        return conv_bn_reference(x, weight, bn_weight, bn_bias, *stats, *rest)

    return checkpoint(conv_bn, x, weight, bn_weight, bn_bias, use_reentrant=False)


# (conv_bn, the model under torch.compile?) by row name; "× twin" is against the same mode's.
ROWS = {"ours": (fused_conv_bn2d, False), "twin": (conv_bn_reference, False),
        "twin + checkpoint": (checkpointed_reference, False),
        "ours, compiled": (fused_conv_bn2d, True), "twin, compiled": (conv_bn_reference, True)}


def training_step(conv_bn: Callable, batch: int, device: str,
                  compiled: bool = False) -> tuple[Callable[[], None], int]:
    """One cnn training step (MSE, Adam) on fixed random data; the bytes its forward saves."""
    g = torch.Generator().manual_seed(0)
    model = CurveCNN(conv_bn=conv_bn, device=device)
    forward = torch.compile(model) if compiled else model
    images = torch.rand(batch, 1, 32, 32, generator=g).to(device)
    targets = torch.randn(batch, 4, generator=g).to(device)
    optimizer = torch.optim.Adam(model.parameters())

    def step() -> None:
        optimizer.zero_grad()
        (forward(images) - targets).square().mean().backward()
        optimizer.step()

    step()  # compiled, and Adam's state exists, before anything is measured
    with saved_tensor_bytes() as saved:
        loss = (forward(images) - targets).square().mean()
    del loss
    return step, saved.bytes


def run(device: str, quick: bool) -> str:
    """The table: one row per conv_bn (and mode) and batch size; --quick runs no compiler."""
    batches, t = ((8,), 0.05) if quick else ((64, 256, 1024), 1.0)
    # The app's data set leaves glibc's malloc with its mmap threshold raised (a block of tens
    # of MiB freed); a process that only runs these steps would page-fault on a share of each
    # step's allocations instead, as many as the order of its allocations happens to cause.
    torch.ones(30 << 18).sum()
    rows = []
    for batch in batches:
        torch.compiler.reset()  # each batch compiled for its own static shapes
        made = {name: training_step(conv_bn, batch, device, compiled)
                for name, (conv_bn, compiled) in ROWS.items() if not (quick and compiled)}
        steps = {name: step for name, (step, _) in made.items()}
        peaks = {}
        for name, step in steps.items():
            with step_peak(device) as peak:
                step()
            peaks[name] = peak.bytes
        ms = medians_ms(steps, t, rounds=1 if quick else 3)
        for name, (_, saved) in made.items():
            twin = "twin, compiled" if ROWS[name][1] else "twin"
            rows.append([name, batch, f"{peaks[name] / 2**20:.1f}",
                         f"{peaks[name] / peaks[twin]:.2f}", f"{saved / 2**20:.2f}", ms[name],
                         f"{ms[name] / ms[twin]:.2f}"])
    return f"{machine(device)}; step ms: medians of torch.utils.benchmark\n\n{table(HEADER, rows)}"


def main(argv: list[str] | None = None, doc: Path = report.DOC) -> str:
    """CLI: print the table; --write puts it in docs/benchmarks.md."""
    return report.main("cnn", __doc__, run, argv, doc)


if __name__ == "__main__":
    main()
