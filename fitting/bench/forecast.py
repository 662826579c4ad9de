"""The forecast task's five transformer ops and its whole training step: ours against the twins.

`python -m fitting.bench.forecast [--write]`: per slot and for a training step (Adam) of the
Forecaster with every slot ours against every slot the twin, at the task's sizes (batch 32,
context 64, width 64, 4 heads, vocabulary 4096) and at 4x the tokens (context 256):
torch.utils.benchmark medians of forward+backward, the tensor peak (fitting.track.memory) and
the bytes saved for backward, each x the twin's, and the issue's goals met or missed.
"""

from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

import models.ops as O
from fitting.bench import report
from fitting.bench.report import machine, medians_ms, table
from fitting.slots import transformer_inputs
from fitting.track.memory import step_peak
from models.forecast import Forecaster

HEADER = ["slot, size (float32)", "ours ms", "× twin", "peak MiB", "× twin", "saved MiB",
          "× twin", "goals (× twin)"]
TWINS = {"norm": (O.rms_norm, O.rms_norm_reference), "glu": (O.swiglu, O.swiglu_reference),
         "rope": (O.rope, O.rope_reference), "attention": (O.attention, O.attention_reference),
         "attention vs the formula": (O.attention, O.attention_formula),
         "cross_entropy": (O.linear_cross_entropy, O.linear_cross_entropy_reference)}
# slot -> (column, bound, at context): the goals
GOALS = {"cross_entropy": [("peak", 0.5, None), ("time", 1.2, None)],
         "attention": [("saved", 0.5, 256)], "attention vs the formula": [("saved", 0.5, 256)],
         "step": [("time", 1.3, None), ("peak", 0.7, None)]}


def case(slot: str, fn: Callable | dict, batch: int, t: int, device: str
         ) -> tuple[Callable, Callable]:
    """(one training step, one forward) of `fn` on `slot`'s inputs at batch x t tokens; for
    "step", of the Forecaster with the ops `fn` (forward, backward, Adam)."""
    if slot == "step":
        torch.manual_seed(0)
        model = Forecaster(context=t, device=device, **fn)
        ids = torch.randint(0, 4096, (batch, t + 1), device=device)
        optimizer = torch.optim.Adam(model.parameters())
        forward = partial(model, ids[:, :-1], ids[:, 1:])

        def step() -> None:
            optimizer.zero_grad()
            forward().backward()
            optimizer.step()
    else:
        inputs = transformer_inputs(slot.split()[0], torch.float32, device, batch, t)
        leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
        forward = partial(fn, *inputs)

        def step() -> None:
            torch.autograd.grad(forward().sum(), leaves)
    step()  # warm, and Adam's state exists, before anything is measured
    return step, forward


def measure(made: dict[str, tuple[Callable, Callable]], device: str, t: float
            ) -> dict[str, dict[str, float]]:
    """ms, peak MiB, saved MiB of each of ours and twin."""
    ms, out = medians_ms({name: step for name, (step, _) in made.items()}, t), {}
    for name, (step, forward) in made.items():
        with step_peak(device) as peak:
            step()
        with O.saved_tensor_bytes() as saved:
            kept = forward()
        del kept
        out[name] = {"time": ms[name], "peak": peak.bytes / 2**20, "saved": saved.bytes / 2**20}
    return out


def goals(slot: str, ratios: dict[str, float], context: int) -> str:
    """Each goal of `slot` that applies at `context`: met, or missed with the ratio."""
    said = [f"{col} ≤ {bound}: " + ("met" if ratios[col] <= bound else "**missed**")
            for col, bound, at in GOALS.get(slot, []) if at in (None, context)]
    return "; ".join(said) or "—"


def run(device: str, quick: bool) -> str:
    """The table: each slot and the whole step, at the task's tokens and at 4x."""
    batch, contexts, t = (2, (16, 64), 0.02) if quick else (32, (64, 256), 0.3)
    rows, twins = [], {s: twin for s, (_, twin) in TWINS.items() if " " not in s}
    for context in contexts:
        for slot, pair in [*TWINS.items(), ("step", ({}, twins))]:
            m = measure({name: case(slot, fn, batch, context, device)
                         for name, fn in zip(("ours", "twin"), pair, strict=True)}, device, t)
            ratios = {k: m["ours"][k] / max(m["twin"][k], 1e-12) for k in m["ours"]}
            rows.append([f"{slot}, {batch}x{context} tokens", m["ours"]["time"],
                         f"{ratios['time']:.2f}", m["ours"]["peak"], f"{ratios['peak']:.2f}",
                         m["ours"]["saved"], f"{ratios['saved']:.2f}",
                         goals(slot, ratios, context)])
    return f"{machine(device)}; medians of torch.utils.benchmark\n\n{table(HEADER, rows)}"


def main(argv: list[str] | None = None, doc: Path = report.DOC) -> str:
    """CLI: print the table; --write puts it in docs/benchmarks.md."""
    return report.main("forecast", __doc__, run, argv, doc)


if __name__ == "__main__":
    main()
