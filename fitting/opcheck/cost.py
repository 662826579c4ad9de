"""The card's cost rows: saved-for-backward bytes and fwd+bwd time against the twin, for the op
alone (at fitting.bench's sizes) and inside its task's model."""

from __future__ import annotations

import torch

from fitting.bench import conv_bn as bench_conv_bn
from fitting.bench.ops import FEATURES, P3_SIZE, ROWS, compare
from fitting.opcheck.memory import op_in_model
from fitting.opcheck.subject import Check, Subject, line
from fitting.opcheck.trial_models import OP_TASK, TASKS, build, describe, loss
from models.ops.choice import OPS


def bench_inputs(op: str, device: torch.device, quick: bool) -> tuple[str, tuple]:
    """(size label, arguments) of `op` at the benchmark's size (smaller when quick)."""
    g = torch.Generator().manual_seed(0)

    def leaf(*shape):
        return torch.randn(*shape, generator=g).to(device).requires_grad_()

    rows, feats = (256, 128) if quick else (ROWS, FEATURES)
    if op == "activation":
        return f"{rows}x{feats}", (leaf(rows, feats),)
    if op == "linear":
        return f"{rows}x{feats} @ {feats}x{feats}", (
            leaf(rows, feats), leaf(feats, feats), leaf(feats))
    if op == "legendre_p3":
        n = P3_SIZE // 10 if quick else P3_SIZE
        return f"{n:,}", (leaf(n),)
    b = bench_conv_bn
    n, c_in, c_out, hw = (8, 4, 8, 16) if quick else (b.N, b.C_IN, b.C_OUT, b.HW)
    stats = (torch.zeros(c_out, device=device), torch.ones(c_out, device=device))
    args = (leaf(n, c_in, hw, hw), leaf(c_out, c_in, b.K, b.K), leaf(c_out), leaf(c_out), *stats,
            True, 0.1, 1e-5, (1, 1), (1, 1), (1, 1), 1)  # fmt: skip
    return f"N={n} {c_in}->{c_out} {hw}x{hw} {b.K}x{b.K}", args


def _times(r: dict) -> str:
    return f"fwd+bwd {r['custom_ms']:.3g} vs {r['builtin_ms']:.3g} ms ({r['time_ratio']:.2f}x)"


def cost_alone(s: Subject) -> Check:
    """Bytes saved for backward and fwd+bwd time, op vs twin, one call at the bench size."""
    if s.op in OPS:
        size, args = bench_inputs(s.op, s.device, s.quick)
    else:
        size, args = "sample 0", s.inputs(0, torch.float32, requires_grad=True)
    t = 0.02 if s.quick else 0.3
    try:
        r = compare(s.op, s.fn, s.twin, list(args), "", t)
    except Exception as err:
        return Check("cost alone", "wrong", f"{size}: raised {line(err)}")
    detail = (
        f"{s.op} {size}: saves {r['custom_bytes']:,} vs {r['builtin_bytes']:,} B "
        f"({r['bytes_ratio']:.2f}x); {_times(r)}"
    )
    return Check("cost alone", "info", detail)


def cost_in_model(s: Subject) -> Check:
    """Bytes the op adds to its task model's saved set (shared storages once), the model's
    total, and a training step's time, op vs twin (every other layer built-in)."""
    task = TASKS[OP_TASK[s.op]]
    name = f"cost in {task.name}"
    try:
        m = op_in_model(s.op, s.fn, s.twin, s.device, s.quick)
        batch = task.batch(s.device, s.quick)
        models = [build(task, "builtin", s.device, ops={s.op: f}) for f in (s.fn, s.twin)]
        steps = [lambda x, y, m=model: loss(task, m, (x, y)) for model in models]
        r = compare(name, *steps, list(batch), "", 0.02 if s.quick else 0.3)
    except Exception as err:
        return Check(name, "wrong", f"raised {line(err)}")
    ratio = m.total / m.twin_total if m.twin_total else float("nan")
    detail = (
        f"{describe(task, batch)}: adds {m.added:,} B to the model's saved set "
        f"(builtin {m.twin_added:,} B); model saves {m.total:,} vs {m.twin_total:,} B "
        f"({ratio:.2f}x); {_times(r)}"
    )
    return Check(name, "info", detail)
