"""Which op made a step non-finite: the step's forward re-run with a hook on every layer, then
its backward under autograd's anomaly mode, which names the backward that returned NaN."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from fitting.tasks import Task, squared_error
from models.ops._checks import impl_name


def first_nonfinite(task: Task, batch: Any) -> str | None:
    """'the output of layer X (Type, impl=fn) went non-finite first' or 'the backward of
    Fn returned ...' for the step on `batch`, or None when the re-run finds nothing to blame.
    The model's parameters and statistics are left as they were."""
    model = task.model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    found: list[str] = []

    def hook(module: nn.Module, args: Any, out: Any) -> None:
        if not found and isinstance(out, torch.Tensor) and not bool(torch.isfinite(out).all()):
            impl = getattr(module, "impl", None)
            how = "" if impl is None else f", impl={impl_name(impl)}"
            found.append(f"the output of layer {names[module]} ({type(module).__name__}{how}) "
                         "went non-finite first")

    names = {m: name or type(m).__name__ for name, m in model.named_modules()}
    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        # Ignored before detect_anomaly starts: it warns (on stderr, above the run's one-line
        # message) as it is entered.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autograd.detect_anomaly(check_nan=True):
                loss = squared_error(task.residuals(model, batch), task.reduction)
                if not found:
                    loss.backward()
    except RuntimeError as err:
        first = str(err).splitlines()[0]
        found.append(f"autograd's anomaly mode: {first}")
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad()
        model.load_state_dict(state)
    return found[0] if found else None
