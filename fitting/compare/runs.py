"""Runs read with TensorBoard's EventAccumulator and results.json, paired, tabled, differenced."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

DIFF_TAG = "loss/train_diff"
# Every scalar; one image and histogram per tag (reading them is the cost, keeping them memory).
SIZE_GUIDANCE = {"scalars": 0, "images": 1, "histograms": 1, "compressedHistograms": 1}
# A run's numbers (Run.number): results.json's key, else the tag's logged values.
FINAL_LOSS, STEP_MS = ("final_loss", "loss/train"), ("step_ms_median", "time/step_ms_median")
SAVED_BYTES = ("saved_bytes", "memory/saved_bytes", np.median)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster at 300 runs


@dataclass
class Run:
    """One run dir: config, results.json ({} if none), scalars, HParams, its reference."""

    name: str  # the path under the root, os.fsdecode'd: surrogates stand for non-UTF-8 bytes
    path: str
    config: dict[str, Any]
    result: dict[str, Any]
    scalars: dict[str, tuple[np.ndarray, np.ndarray]]
    ops: dict[str, str]  # each slot's op choice as text
    status: str  # results.json's (completed, diverged, ...), else running or killed
    reference: Run | None = None

    def number(self, key: str, tag: str, pick=lambda values: values[-1]) -> float | None:
        """results.json's `key`, else `pick` of the tag's logged values; None without both."""
        if self.result.get(key) is not None:
            return float(self.result[key])
        series = self.scalars.get(tag)
        return float(pick(series[1])) if series is not None and len(series[1]) else None


def _op_text(choice: Any, config: dict[str, Any]) -> str:
    """As fitting.ops.describe_op (which imports torch), an interpolation (`${impl}`) resolved."""
    if isinstance(choice, str) and re.fullmatch(r"\$\{\w+\}", choice):
        choice = config.get(choice[2:-1], choice)
    if not isinstance(choice, dict):
        return str(choice)
    args = ", ".join(f"{k}={v}" for k, v in choice.items() if not str(k).startswith("_"))
    return f"{choice.get('_target_', '?')}({args})"


def shown(text: str) -> str:
    """Text as it can be printed: a non-UTF-8 byte of a file name becomes '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _load(path: str, load) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError, TypeError, yaml.YAMLError), open(path, "rb") as f:
        return dict(load(f))  # None where absent, half-written or not ours


def _scalars(path: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The scalars logged in the event files of `path`, as (steps, values) by tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # TensorBoard opens only UTF-8 paths: reach it by a link
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(path, os.path.join(tmp, "run"))
            return _scalars(os.path.join(tmp, "run"))
    acc = EventAccumulator(path, size_guidance=SIZE_GUIDANCE)
    acc.Reload()
    return {tag: (np.array([e.step for e in events]), np.array([e.value for e in events]))
            for tag in acc.Tags()["scalars"] for events in [acc.Scalars(tag)]}


def read_runs(root: str | os.PathLike) -> list[Run]:
    """The run dirs (with .hydra/config.yaml or results.json) under `root`, in job order."""
    root = os.path.abspath(os.fsdecode(root))
    runs = []
    for path, dirs, files in os.walk(root):
        config = os.path.join(path, ".hydra", "config.yaml")
        if "results.json" not in files and not os.path.isfile(config):
            dirs.sort(key=lambda d: re.sub(r"^\d+", lambda n: n[0].zfill(9), d))  # 2_ before 10_
            continue
        dirs.clear()  # a run dir holds no other runs
        name = os.path.relpath(path, os.path.dirname(root) if path == root else root)
        config = _load(config, lambda f: yaml.load(f, _Loader)) or {}
        result = _load(os.path.join(path, "results.json"), json.load) or {}
        ops = config.get("ops", {})
        slots = result.get("ops") or ops  # the task's slots, once it has run
        runs.append(Run(name, path, config, result, _scalars(path),
                        {s: _op_text(c, config) for s, c in ops.items() if s in slots},
                        str(result.get("status", "running or killed"))))
    return runs


def group_key(run: Run, *ignore: str) -> str:
    """The config but ops (and `ignore`): equal for runs that differ only in their ops."""
    cfg = {k: v for k, v in run.config.items() if k not in ("ops", "impl", *ignore)}
    return json.dumps(cfg, sort_keys=True, default=str) if run.config else run.path


def differing(runs: list[Run]) -> list[str]:
    """The op slots whose choice differs across `runs` (a run without the slot: no choice)."""
    slots = dict.fromkeys(slot for run in runs for slot in run.ops)
    return [s for s in slots if len({r.ops[s] for r in runs if s in r.ops}) > 1]


def pair(runs: list[Run]) -> None:
    """Set each run's `reference`: of runs differing only in ops, builtin, torch. or the first."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(group_key(run), []).append(run)
    for group in groups.values():
        slots = differing(group)
        ref = max(group, key=lambda r: (sum(r.ops.get(s) == "builtin" for s in slots),
                                        sum(r.ops.get(s, "").startswith("torch.") for s in slots)))
        for run in group:
            run.reference = ref if run.ops != ref.ops else None


def loss_gap(mine: Run, ref: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mine − reference, reference) of loss/train at the steps both logged."""
    (sa, va), (sb, vb) = (r.scalars.get("loss/train", ([], [])) for r in (mine, ref))
    steps, ia, ib = np.intersect1d(sa, sb, return_indices=True)
    ref_loss = np.asarray(vb, np.float64)[ib]
    return steps, np.asarray(va, np.float64)[ia] - ref_loss, ref_loss


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    return "\n".join("| " + " | ".join(cells) + " |"
                     for cells in [header, ["---"] * len(header), *rows])


def runs_table(runs: list[Run]) -> str:
    """The per-run markdown table (after `pair`); ops: the choices that differ across runs."""
    slots, refs = differing(runs), {id(r.reference) for r in runs}
    rows = []
    for run in runs:
        ref, loss, ms = run.reference, run.number(*FINAL_LOSS), run.number(*STEP_MS)
        delta = times = "ref" if id(run) in refs else ""
        if ref is not None:
            ref_loss = ref.number(*FINAL_LOSS)
            delta = fmt(None if None in (loss, ref_loss) else loss - ref_loss, ".3g")
            ref_ms = ref.number(*STEP_MS)
            times = fmt(ms / ref_ms if ms is not None and ref_ms else None, ".3f")
        ops = ", ".join(f"{s}={c}" for s, c in run.ops.items() if s in slots or not slots)
        rows.append([f"`{shown(run.name)}`", shown(ops), fmt(loss, ".6g"), delta, fmt(ms, ".4g"),
                     times, fmt(run.number(*SAVED_BYTES), ",.0f"), run.status])
    return markdown(["job", "ops", "final loss", "Δ loss vs ref", "step ms (median)", "× ref",
                     "saved bytes", "status"], rows)


def write_differences(runs: list[Run], out: str) -> list[str]:
    """Write `out`/differences: a DIFF_TAG run per pair; say what each line shows, in words."""
    from tensorboard.summary import Writer  # TensorBoard's own, numpy only: no torch to import

    lines = []
    with tempfile.TemporaryDirectory() as tmp:  # TensorBoard writes only to UTF-8 paths
        staged = os.path.join(tmp, "differences")
        for run in (r for r in runs if r.reference is not None):
            steps, gap, _ = loss_gap(run, run.reference)
            said = ("missing (no step logged by both)" if not len(steps)
                    else f"identical at all {len(steps)} common steps (a flat line at 0)"
                    if not gap.any() else f"max |Δ| {np.abs(gap).max():.3g}")
            lines.append(f"{shown(run.name)} − {shown(run.reference.name)}: {said}")
            if len(steps):
                name = re.sub(r"[^\w.,=+-]+", "_", f"{run.name} minus {run.reference.name}")
                writer = Writer(os.path.join(staged, name))
                for step, value in zip(steps.tolist(), gap.tolist(), strict=True):
                    writer.add_scalar(DIFF_TAG, value, step, description=said)
                writer.close()
        shutil.rmtree(os.path.join(out, "differences"), ignore_errors=True)
        if os.path.isdir(staged):
            shutil.copytree(staged, os.path.join(out, "differences"))
    return lines
