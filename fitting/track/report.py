"""The run's end in words and numbers: its closing lines, results.json, and a profiler's trace."""

import json
import logging
import shlex
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from fitting.track.files import write_atomic
from fitting.track.memory import peak_rss_bytes

log = logging.getLogger("fitting.run")  # the run's lines, under the run's logger name
RESULTS, TRACE = "results.json", "profile.pt.trace.json"


def closing(cfg: DictConfig, out: Path, task: Any, state: Any, times: list[float],
            summary: dict[str, float], fig: Path, sweep: bool) -> None:
    """Model, final loss and cost, why it stopped, final numbers, figure, run dir, TensorBoard;
    a sweep's job: its final loss and run dir alone (the sweep's end has its table)."""
    val = "" if state.val_loss is None else f", validation loss {state.val_loss:.6g}"
    saved = f", {state.saved_bytes:,} bytes saved for backward" if state.saved_bytes else ""
    why = (f"converged after {state.step} of {cfg.steps} steps" if state.converged
           else f"ran all {state.step} steps")
    summary = dict(summary)
    gap, optimum = summary.pop("rel_gap", None), summary.pop("optimum_loss", None)
    if gap is not None:  # poly3: the loss at the final parameters against the exact optimum
        exact = f"the exact optimum of the {cfg.dtype} data, {optimum:.12g}"  # float32: its own
        why += (f"; at {exact}, within rounding" if abs(gap) < 1e-12
                else f"; {gap:.3g} relative above {exact}")
    if sweep:  # the sweep's end prints the rest
        log.info("final loss %.6g after %d steps%s; run dir: %s", state.loss, state.step, val, out)
        return
    lines = [f"Result: {task.describe(task.model)}",
             f"final loss {state.loss:.6g} after {state.step} steps{val} ({state.train_s:.2f} s "
             f"of training, median step {times[len(times) // 2]:.3f} ms{saved})",
             f"stopped: {why}",
             "at the end: " + ", ".join(f"{k}={v:.6g}" for k, v in summary.items()),
             f"figure: {fig}", f"run dir: {out}",
             f"view it: tensorboard --logdir {shlex.quote(str(out))}"]
    for text in lines:
        log.info("%s", text)


def results(out: Path, status: str, cfg: DictConfig, state: Any, times: list[float],
            info: dict[str, Any], summary: dict[str, float]) -> None:
    """results.json, written whole: the run's end at full precision."""
    data = {"status": status, "step": state.step, "steps": cfg.steps,
            "final_loss": float(state.loss), "val_loss": state.val_loss,
            "step_ms_median": times[len(times) // 2] if times else None,  # the loop sorts them
            "saved_bytes": state.saved_bytes, "peak_rss_bytes": peak_rss_bytes(),
            "train_s": state.train_s,
            **{k: info[k] for k in ("task", "optimizer", "ops", "op_sources")}, "summary": summary}
    write_atomic(out / RESULTS, (json.dumps(data, indent=2) + "\n").encode())


def profiler(out: Path) -> Any:
    """torch.profiler over steps 2-4: a Chrome trace (ui.perfetto.dev), the top ops logged."""
    def ready(prof: Any) -> None:
        prof.export_chrome_trace(str(out / TRACE))
        log.info("profile of steps 2-4: %s; top ops:\n%s", out / TRACE,
                 prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))

    plan = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    return torch.profiler.profile(schedule=plan, on_trace_ready=ready)
