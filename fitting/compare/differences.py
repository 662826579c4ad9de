"""Runs of mine − reference for TensorBoard: for each pair of a sweep, the difference of their
training losses at their common steps, logged as `loss_by_task/<task>/train_diff` in
`<sweep>/differences/<mine>/`. Custom Scalars draws it beside the overlay of the two curves,
which hides one curve under the other where they coincide."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from fitting.compare.pairing import group_runs, pair_runs
from fitting.compare.runs_reader import DIFFERENCES, Run, read_runs

LOSS = "loss/train"
TAG = "loss_by_task/{task}/train_diff"


def write_differences(root: Path, pairs: list[tuple[Run, Run]]) -> list[Path]:
    """One run per pair under `root`/differences (replacing earlier ones); their dirs."""
    out = root / DIFFERENCES
    shutil.rmtree(out, ignore_errors=True)
    written = []
    for mine, reference in pairs:
        if LOSS not in mine.scalars or LOSS not in reference.scalars:
            continue
        a, b = mine.scalars[LOSS], reference.scalars[LOSS]
        steps, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
        name = re.sub(r"[^\w.,=+-]+", "_", f"{mine.name} minus {reference.name}")
        run_dir = out / name
        run_dir.mkdir(parents=True)
        writer = EventFileWriter(str(run_dir))
        tag = TAG.format(task=mine.task)
        for step, value in zip(steps, np.asarray(a.values)[ia] - np.asarray(b.values)[ib],
                               strict=True):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
            writer.add_event(Event(step=int(step), summary=summary))
        writer.close()
        written.append(run_dir)
    return written


def sweep_differences(root: Path) -> list[Path]:
    """Read the runs under `root`, pair them, and write their difference runs."""
    runs = read_runs(root)
    pairs = [pair for group in group_runs(runs) for pair in pair_runs(group)[0]]
    return write_differences(root, pairs)
