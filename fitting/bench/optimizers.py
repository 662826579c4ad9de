"""Benchmark: iterations and wall time for each optimizer to reach the exact poly3 optimum.

Run `python -m fitting.bench.optimizers [--repeats 3] [--impl custom] [--threads 1]`; it prints
a markdown table. Each optimizer starts from the tutorial's a=0, b=−1, c=0, d=0.3 on
x = linspace(−π, π, 2000) and minimizes the sum of squared errors; "reached" is the first
iteration whose loss is within 1e-6 relative of the exact optimum of the data in that dtype
(`exact_poly3_optimum`).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from fitting.bench.report import DOC, write_section
from fitting.optim.levenberg_marquardt import LevenbergMarquardt
from fitting.optim.newton import Newton
from fitting.optim.second_order import residual_fn_from_model
from fitting.tasks.poly3 import residuals
from fitting.tasks.poly3_optimum import exact_poly3_optimum, poly3_data
from models.poly3 import Poly3

REL_GAP = 1e-6
START = (0.0, -1.0, 0.0, 0.3)


def _second_order(cls: type) -> Callable[[nn.Module, tuple], torch.optim.Optimizer]:
    """A builder of `cls` (Newton or LevenbergMarquardt) on the model's sum of squares."""

    def build(model: nn.Module, batch: tuple) -> torch.optim.Optimizer:
        fn = residual_fn_from_model(model, residuals, batch)
        return cls(model.parameters(), fn, reduction="sum")

    return build


# name -> (iterations, label, builder(model, batch)); sgd is torch.optim.SGD at the tutorial's
# lr, adam's lr is the best of 1e-3..1e-1.
PLAN: dict[str, tuple[int, str, Callable[[nn.Module, tuple], torch.optim.Optimizer]]] = {
    "sgd": (2000, "sgd lr=5e-6", lambda model, _: torch.optim.SGD(model.parameters(), lr=5e-6)),
    "adam": (2000, "adam lr=3e-3",
             lambda model, _: torch.optim.Adam(model.parameters(), lr=3e-3)),
    "lbfgs": (50, "lbfgs strong-Wolfe", lambda model, _: torch.optim.LBFGS(
        model.parameters(), max_iter=1, max_eval=25, tolerance_grad=0.0,
        tolerance_change=0.0, line_search_fn="strong_wolfe")),
    "newton": (50, "newton", _second_order(Newton)),
    "lm": (50, "lm", _second_order(LevenbergMarquardt)),
}


@dataclass
class Run:
    """One optimizer run: when it reached the optimum and where it ended."""

    label: str
    dtype: str
    iterations: int | str
    reached: int | str | None
    time_to_reach: float | None
    total_time: float
    loss: float
    rel_gap: float
    grad_norm: float


def run(name: str, impl: str, dtype: torch.dtype, optimum: float) -> Run:
    """Fit once; the loss after each step is the next step's returned (pre-step) loss."""
    iterations, label, build = PLAN[name]
    batch = poly3_data(dtype)
    model = Poly3(*START, impl=impl, dtype=dtype)
    optimizer = build(model, batch)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = residuals(model, batch).square().sum()
        loss.backward()
        return loss

    losses, times = [], []
    start = time.perf_counter()
    for _ in range(iterations):
        losses.append(float(optimizer.step(closure).detach()))
        times.append(time.perf_counter() - start)
    total = time.perf_counter() - start
    losses.append(float(closure().detach()))  # after the last step; fills .grad
    grad_norm = float(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm())
    reached = next(
        (k for k, loss in enumerate(losses) if (loss - optimum) / optimum <= REL_GAP), None
    )
    return Run(
        label,
        str(dtype).removeprefix("torch."),
        iterations,
        reached,
        times[reached - 1] if reached else None,
        total,
        losses[-1],
        (losses[-1] - optimum) / optimum,
        grad_norm,
    )


def best_of(repeats: int, fn: Callable[[], Run]) -> Run:
    """The run with the least total time (the runs are deterministic but the machine is not)."""
    return min((fn() for _ in range(repeats)), key=lambda r: r.total_time)


def scipy_reference(optimum: float) -> list[Run]:
    """scipy.optimize.curve_fit from the same start, default ('lm') and 'trf' tight; float64."""
    try:
        import numpy as np
        from scipy.optimize import curve_fit
    except ImportError:
        return []
    x, y = (t.numpy() for t in poly3_data(torch.float64))

    def model(x, a, b, c, d):
        u = c + d * x
        return a + b * 0.5 * (5 * u**3 - 3 * u)

    def jac(x, a, b, c, d):
        u = c + d * x
        dp3 = b * (7.5 * u**2 - 1.5)
        return np.stack([np.ones_like(x), 0.5 * (5 * u**3 - 3 * u), dp3, dp3 * x], axis=1)

    runs = []
    for label, kwargs in (
        ("scipy curve_fit (lm, numeric J)", {}),
        (
            "scipy curve_fit (trf, tol 1e-15, J)",
            dict(method="trf", jac=jac, xtol=1e-15, ftol=1e-15, gtol=1e-15),
        ),
    ):
        start = time.perf_counter()
        p, _, info, _, _ = curve_fit(model, x, y, p0=START, full_output=True, **kwargs)
        total = time.perf_counter() - start
        r = model(x, *p) - y
        loss = float(np.sum(r**2))
        grad = float(np.linalg.norm(2 * jac(x, *p).T @ r))
        gap = (loss - optimum) / optimum
        reached = "n/a" if gap <= REL_GAP else None
        evals = f"{info['nfev']} evals"
        runs.append(Run(label, "float64", evals, reached, None, total, loss, gap, grad))
    return runs


def table(runs: list[Run]) -> str:
    """The runs as a markdown table."""
    lines = [
        "| optimizer | dtype | iterations to 1e-6 | time to 1e-6 | iterations run | total time "
        "| final loss | final rel. gap | final ‖∇F‖ |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        reached = "not reached" if r.reached is None else str(r.reached)
        to_reach = "—" if r.time_to_reach is None else f"{r.time_to_reach * 1e3:.1f} ms"
        lines.append(
            f"| {r.label} | {r.dtype} | {reached} | {to_reach} | {r.iterations} "
            f"| {r.total_time * 1e3:.1f} ms | {r.loss:.10f} | {r.rel_gap:.1e} | {r.grad_norm:.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run every optimizer in float64 and float32 and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell; the fastest counts")
    parser.add_argument("--impl", default="custom", choices=("custom", "builtin"))
    parser.add_argument("--optimizers", default=",".join(PLAN), help="comma-separated subset")
    # One thread: ops on 2000 elements and 4×4 solves gain nothing from more, and on a busy
    # machine OpenMP threads that wait for a core make every op 10× slower (measured).
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = []
    for dtype in (torch.float64, torch.float32):
        optimum = exact_poly3_optimum(dtype).loss
        for name in args.optimizers.split(","):
            cell = functools.partial(run, name, args.impl, dtype, optimum)
            runs.append(best_of(args.repeats, cell))
    runs += scipy_reference(exact_poly3_optimum(torch.float64).loss)
    body = (
        f"- exact optimum (float64 data): {exact_poly3_optimum(torch.float64).loss:.15f}\n"
        f"- exact optimum (float32 data): {exact_poly3_optimum(torch.float32).loss:.15f}\n"
        f"- impl={args.impl}, torch {torch.__version__}, {torch.get_num_threads()} threads\n\n"
        f"{table(runs)}"
    )
    print(body)
    command = f"python -m fitting.bench.optimizers --repeats {args.repeats} --impl {args.impl}"
    write_section(DOC, "optimizers", command, body)


if __name__ == "__main__":
    main()
