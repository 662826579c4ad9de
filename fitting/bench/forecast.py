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


def op_inputs(slot: str, batch: int, t: int, device: str, vocab: int = 4096, width: int = 64,
              heads: int = 4) -> list:
    """The inputs the Forecaster passes `slot` at batch x t tokens, leaves requiring grad."""
    slot = slot.split()[0]
    def leaf(*shape):
        return torch.randn(*shape, device=device).requires_grad_()
    head = width // heads
    return {"norm": lambda: [leaf(batch, t, width), leaf(width), 1e-6],
            "glu": lambda: [leaf(batch, t, 4 * width), leaf(batch, t, 4 * width)],
            "rope": lambda: [leaf(batch, heads, t, head),
                             *(c.float().to(device) for c in O.rope_tables(t, head))],
            "attention": lambda: [leaf(batch, heads, t, head) for _ in range(3)],
            "cross_entropy": lambda: [leaf(batch * t, width), leaf(vocab, width),
                                      torch.randint(0, vocab, (batch * t,), device=device)],
            }[slot]()


def op_step(fn: Callable, inputs: list) -> Callable[[], object]:
    """One forward and backward of fn(*inputs)."""
    leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    grad = torch.ones_like(fn(*inputs))
    return lambda: torch.autograd.grad(fn(*inputs), leaves, grad)


def model_step(ops: dict, batch: int, t: int, device: str) -> tuple[Callable, Callable]:
    """A Forecaster training step (forward, backward, Adam) at context t; and its forward."""
    torch.manual_seed(0)
    model = Forecaster(context=t, device=device, **ops)
    ids = torch.randint(0, 4096, (batch, t + 1), device=device)
    optimizer = torch.optim.Adam(model.parameters())

    def step() -> None:
        optimizer.zero_grad()
        model(ids[:, :-1], ids[:, 1:]).backward()
        optimizer.step()
    step()  # Adam's state exists before anything is measured
    return step, lambda: model(ids[:, :-1], ids[:, 1:])


def measure(steps: dict[str, Callable], forwards: dict[str, Callable], device: str,
            t: float) -> dict[str, dict[str, float]]:
    """ms, peak MiB, saved MiB of each of ours and twin."""
    ms, out = medians_ms(steps, t, rounds=3), {}
    for name, step in steps.items():
        with step_peak(device) as peak:
            step()
        with O.saved_tensor_bytes() as saved:
            kept = forwards[name]()
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
    rows = []
    for context in contexts:
        for slot, (ours, twin) in [*TWINS.items(), ("step", (None, None))]:
            if slot == "step":
                made = {"ours": model_step({}, batch, context, device),
                        "twin": model_step({s: tw for s, (_, tw) in TWINS.items() if " " not in s},
                                           batch, context, device)}
                steps, forwards = ({k: v[i] for k, v in made.items()} for i in (0, 1))
            else:
                inputs = op_inputs(slot, batch, context, device)
                steps = {"ours": op_step(ours, inputs), "twin": op_step(twin, inputs)}
                forwards = {"ours": partial(ours, *inputs), "twin": partial(twin, *inputs)}
            m = measure(steps, forwards, device, t)
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
