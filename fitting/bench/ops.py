"""Each op against its twin: forward+backward time and the bytes saved for backward.

`python -m fitting.bench.ops [--write]`: torch.utils.benchmark medians of ours, the twin and,
for legendre_p3 (a chain of elementwise ops for inductor to fuse), the twin under torch.compile.
"""

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from fitting.bench import report
from fitting.bench.report import machine, medians_ms, table
from models.ops import (
    conv_bn_reference,
    fused_conv_bn2d,
    legendre_p3,
    legendre_p3_reference,
    linear,
    relu,
    relu_masked,
    saved_tensor_bytes,
)

HEADER = ["op, size (float32)", "ours ms", "twin ms", "ours / twin", "compiled twin ms",
          "ours KiB saved", "twin KiB saved"]


def cases(device: str, quick: bool) -> list[tuple[str, Callable, Callable, list, bool]]:
    """(name, ours, twin, inputs, compile the twin?) at the sizes the models use and larger."""
    s = 8 if quick else 1  # --quick: sizes / 8 per dim

    def leaf(*shape):
        return torch.randn(*shape, device=device).requires_grad_()

    x, w, b = leaf(1024 // s, 512 // s), leaf(512 // s, 512 // s), leaf(512 // s)
    n, c_in, c_out, hw = 64 // s, 16, 32, 32 // s
    conv_in = [leaf(n, c_in, hw, hw), leaf(c_out, c_in, 3, 3), leaf(c_out), leaf(c_out)]
    stats = [torch.zeros(c_out, device=device), torch.ones(c_out, device=device)]

    def conv_bn(fn):
        return lambda x, w, g, b: fn(x, w, g, b, *stats, True, 0.1, 1e-5, 1, 1)

    p3 = [(f"legendre_p3 {size:,}", legendre_p3, legendre_p3_reference, [leaf(size)], True)
          for size in (2_000, 1_000_000 // s**2)]
    return [
        (f"linear {tuple(x.shape)} @ {tuple(w.shape)}", linear, F.linear, [x, w, b], False),
        (f"relu {tuple(x.shape)}", relu, torch.relu, [x], False),
        (f"relu_masked {tuple(x.shape)}", relu_masked, torch.relu, [x], False),
        *p3,
        (f"fused_conv_bn2d N={n} {c_in}->{c_out} {hw}x{hw} 3x3, train", conv_bn(fused_conv_bn2d),
         conv_bn(conv_bn_reference), conv_in, False),
    ]


def step(fn: Callable, inputs: list[torch.Tensor]) -> Callable[[], object]:
    """One forward and backward of fn(*inputs)."""
    grad = torch.ones_like(fn(*inputs))
    return lambda: torch.autograd.grad(fn(*inputs), inputs, grad)


def saved_kib(fn: Callable, inputs: list[torch.Tensor]) -> float:
    """KiB fn(*inputs) saves for backward (each storage once)."""
    with saved_tensor_bytes() as saved:
        fn(*inputs)
    return saved.bytes / 1024


def run(device: str, quick: bool) -> str:
    """The table: one row per op."""
    t = 0.05 if quick else 0.3
    rows = []
    for name, ours, twin, inputs, compile_twin in cases(device, quick):
        fns = {"ours": step(ours, inputs), "twin": step(twin, inputs)}
        if compile_twin and not quick:
            torch.compiler.reset()
            fns["compiled"] = step(torch.compile(twin), inputs)
        ms = medians_ms(fns, t, rounds=1 if quick else 3)
        rows.append([name, ms["ours"], ms["twin"], f"{ms['ours'] / ms['twin']:.2f}",
                     ms.get("compiled", "—"), f"{saved_kib(ours, inputs):,.0f}",
                     f"{saved_kib(twin, inputs):,.0f}"])
    return f"{machine(device)}; medians of torch.utils.benchmark\n\n{table(HEADER, rows)}"


def main(argv: list[str] | None = None, doc: Path = report.DOC) -> str:
    """CLI: print the table; --write puts it in docs/benchmarks.md."""
    return report.main("ops", __doc__, run, argv, doc)


if __name__ == "__main__":
    main()
