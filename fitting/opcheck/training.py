"""The card's training comparison: the task's model with the op vs with its twin, same start."""

from __future__ import annotations

import math

import torch

from fitting.opcheck.subject import Check, Subject, line
from fitting.opcheck.trial_models import OP_TASK, TASKS, build, describe, loss

RTOL = 1e-4  # the largest relative difference of the loss curves that passes


def loss_curve(s: Subject, fn, steps: int) -> list[float]:
    """Training losses of the op's task model running `fn` as the op (SGD, fixed batch)."""
    task = TASKS[OP_TASK[s.op]]
    model = build(task, "builtin", s.device, ops={s.op: fn})
    batch = task.batch(s.device, s.quick)
    opt = torch.optim.SGD(model.parameters(), lr=task.lr, momentum=task.momentum)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        value = loss(task, model, batch)
        value.backward()
        opt.step()
        losses.append(value.item())
    return losses


def training(s: Subject) -> Check:
    """Max relative difference of the loss curves, op vs twin, over a short run."""
    task = TASKS[OP_TASK[s.op]]
    steps = max(task.steps // 4, 5) if s.quick else task.steps
    name = f"training ({task.name})"
    setting = f"{steps} SGD steps, float32, {describe(task, task.batch(s.device, s.quick))}"
    want = loss_curve(s, s.twin, steps)
    try:
        got = loss_curve(s, s.fn, steps)
    except Exception as err:
        return Check(name, "wrong", f"{setting}: raised {line(err)}", "training")
    rtol = RTOL if s.tol[0] is None else s.tol[0]  # an approximate op's --rtol
    rel = [abs(g - w) / abs(w) if w else abs(g) for g, w in zip(got, want, strict=True)]
    worst = max(range(steps), key=lambda i: rel[i] if math.isfinite(rel[i]) else math.inf)
    ok = all(math.isfinite(r) and r <= rtol for r in rel)
    detail = (
        f"{setting}: max rel diff of the loss curves {rel[worst]:.3g} at step {worst + 1} "
        f"(loss {got[worst]:.6g} vs {want[worst]:.6g}; passes <= {rtol:g})"
    )
    return Check(name, "pass" if ok else "wrong", detail, "training")
