"""One TensorBoard run per training run: scalars, histograms, figures, the HParams session and the
Custom Scalars layout, all through torch.utils.tensorboard.SummaryWriter."""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fitting.track.files import write_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# The HParams table's metric columns (each tag's last value), in the experiment that
# fitting.compare's callback writes into a sweep's dir. Its table shows about 5 hparam and
# metric columns in a 1366 px window: not loss/val (Time Series has it).
METRICS = ("loss/train", "time/step_ms_median", "memory/saved_bytes")
# What fitting.compare's difference runs log: mine − reference of loss/train. Time Series
# shows a group's cards by name: it, then the log10, then loss/train and loss/val.
DIFF_TAG = "loss/diff_train"
# log10 of loss/train: its decades apart on TensorBoard's linear axis, beside loss/train.
LOG10_TAG = "loss/log10_train"
# The same on a log step axis, x = 1000·log10(step + 1) (TensorBoard's is linear): 1000 is step
# 9, 2000 step 99, 3000 step 999, so a 17-step newton run spans a third of a 2000-step one's.
LOG_STEP_TAG = "loss/log10_train_vs_log10_step"
COST_TAGS = ("time/step_ms", "time/step_ms_median", "memory/saved_bytes")


def _chart(*tags: str) -> list:
    """A multi-line chart of exactly these tags, overlaying every run that logs them."""
    return ["Multiline", [f"^{re.escape(tag)}$" for tag in tags]]


# train and val apart: each chart has one line per run, so identical runs share one line. No
# chart without a line: loss/val's joins on the first validation (poly3 has none), the
# mine − reference chart comes with fitting.compare's difference runs.
LAYOUT = {
    "loss": {"log10 loss/train, every run": _chart(LOG10_TAG),
             "log10 loss/train against 1000·log10(step + 1)": _chart(LOG_STEP_TAG),
             "loss/train, every run": _chart("loss/train")},
    "cost per step": {**{tag: _chart(tag) for tag in COST_TAGS},  # a plain sweep's jobs: no RSS
                      "memory/peak_rss_bytes, else peak_bytes":
                          _chart("memory/peak_rss_bytes", "memory/peak_bytes")},
    "optimizer": {"optim/grad_norm": _chart("optim/grad_norm")},
}
VAL_LAYOUT = {**LAYOUT, "loss": {**LAYOUT["loss"], "loss/val, every run": _chart("loss/val")}}
DIFF_LAYOUT = {"loss": {"loss/train, mine − reference (a line at 0 = identical)": _chart(DIFF_TAG)}}


class TensorBoard(AbstractContextManager):
    """A SummaryWriter on `log_dir`, closed when the `with` block exits. `purge_step` (a resumed
    run): TensorBoard drops what earlier sessions logged at that step or later."""

    def __init__(self, log_dir: str | Path, purge_step: int | None = None) -> None:
        # Imported here: tensorboard costs ~0.2 s of startup, paid only by runs that log.
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        # A name no one can guess (TensorBoard's is time, host, pid, a count): a link planted
        # in the dir under it cannot be there to be followed.
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge_step, max_queue=1000,
                                    flush_secs=2, filename_suffix=f".{secrets.token_hex(8)}")
        self.writer.add_custom_scalars(LAYOUT)
        self.val_charted = False

    def __exit__(self, *exc: object) -> None:
        self.writer.close()

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Log scalars at `step`, tags as given; with 'loss/train', LOG10_TAG and LOG_STEP_TAG."""
        from torch.utils.tensorboard.summary import scalar

        if "loss/val" in values and not self.val_charted:  # Custom Scalars reads the last
            self.val_charted = True
            self.writer.add_custom_scalars(VAL_LAYOUT)
        if values.get("loss/train", 0) > 0:
            values = {**values, LOG10_TAG: math.log10(values["loss/train"])}
            self.writer.add_scalar(LOG_STEP_TAG, values[LOG10_TAG],
                                   round(1000 * math.log10(step + 1)))
        # One event for all, not one per tag as add_scalar writes: the writer checksums each
        # event in Python on its own thread, competing with the training for the GIL.
        summaries = [scalar(tag, float(value)) for tag, value in values.items()]
        if summaries:
            for summary in summaries[1:]:
                summaries[0].value.extend(summary.value)
            self.writer.file_writer.add_summary(summaries[0], step)

    def histograms(self, step: int, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Histograms 'weights/<name>' and 'weights/<name>.grad' of the non-scalar parameters."""
        for name, p in named:
            if p.ndim:
                self.writer.add_histogram(f"weights/{name}", p.detach().float().cpu(), step)
                if p.grad is not None:
                    self.writer.add_histogram(f"weights/{name}.grad",
                                              p.grad.detach().float().cpu(), step)

    def figure(self, tag: str, fig: Figure, step: int, png_path: str | Path) -> None:
        """Save `fig` as the PNG `png_path` and log it as image `tag` at `step`."""
        self.writer.add_image(tag, save_png(fig, png_path), step, dataformats="HWC")

    def hparams(self, values: Mapping[str, str]) -> None:
        """This run's row in the HParams table (hparam_values), written into this run itself,
        not into add_hparams' timestamped sub-run; its Trial ID: trial_id(log_dir)."""
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb
        from torch.utils.tensorboard.summary import hparams

        # The session only, not the experiment (the columns and their domains): TensorBoard
        # takes the first experiment it finds; fitting.compare's callback writes the sweep's.
        _, _, end = hparams(dict(values), {})
        for summary in (hparams_pb(dict(values), trial_id=trial_id(self.log_dir)), end):
            self.writer.file_writer.add_summary(summary)


def hparam_values(run: Mapping[str, Any], config: Mapping[str, Any],
                  overrides: Iterable[str]) -> dict[str, str]:
    """A run's HParams values, text (parallel coordinates drops a row that lacks one): its task,
    optimizer and op in each slot of its task (`ops.<slot>`, as results.json names them), lr,
    seed and every other command-line override."""
    lr = config["optimizer"].get("lr")  # as text: newton and lm have none, "-"
    values = {"task": run["task"], "optimizer": run["optimizer"], "seed": str(config["seed"]),
              "lr": "-" if lr is None else f"{lr:g}",
              **{f"ops.{slot}": text for slot, text in run["ops"].items()}}
    for key, _, value in (o.lstrip("+~").partition("=") for o in overrides):
        if key not in ("impl", "resume", "optimizer.lr") and key[:4] != "ops.":
            values.setdefault(key, value)
    return values


def save_png(fig: Figure, path: str | Path) -> np.ndarray:
    """Render `fig` (Agg, no display), write it to `path` as a PNG; its RGBA pixels (h, w, 4)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba()).copy()
    write_atomic(path, lambda f: Image.fromarray(pixels).save(f, format="png"))
    return pixels


def trial_id(log_dir: Path) -> str:
    """Short, unique in a logdir of sweeps: a job's `21-05-33 #0` (its sweep's time and number;
    the columns say the rest), else the run dir's parent and name (`2026-11-27 21-05-33-…`)."""
    job, time = re.match(r"\d+(?=_)", log_dir.name), log_dir.parent.name
    time = re.sub(r"^(\d\d-\d\d-\d\d)-\d+$", r"\1", time) if job else time  # %H-%M-%S-%f
    return f"{time} #{job[0]}" if job else f"{time} {log_dir.name}"


def norms(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """'params/<name>' of each scalar parameter (poly3's a, b, c, d); 'norms/weight/<name>' and
    'norms/grad/<name>' of the others. One device sync for all."""
    tags, values = [], []
    for name, p in named:
        if not p.ndim:
            tags.append(f"params/{name}")
            values.append(p.detach())
            continue
        tags.append(f"norms/weight/{name}")
        values.append(torch.linalg.vector_norm(p.detach()))
        if p.grad is not None:
            tags.append(f"norms/grad/{name}")
            values.append(torch.linalg.vector_norm(p.grad.detach()))
    return dict(zip(tags, torch.stack(values).tolist(), strict=True)) if values else {}
