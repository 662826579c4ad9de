"""One TensorBoard run per job: scalars, histograms, figures (also as PNG), hparams and the
custom-scalars layout that overlays the runs of a sweep."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from fitting.track.figures import FigureSpec


log = logging.getLogger(__name__)

# The event file is flushed at least this often, so a TensorBoard watching the run keeps up.
FLUSH_SECONDS = 2

# The per-step record that carries every per-step tag; its first one writes the layout.
LOSS_TAG = "loss/train"
# Per-parameter tags: the values of scalar parameters (poly3) or the norms of tensors.
PARAM_PREFIXES = ("params/", "weight_norm/")
# Charts of the "cost per step" category (the memory/peak_* tags: fitting/track/memory.py).
COST_TAGS = ("memory/saved_bytes", "memory/peak_bytes", "memory/peak_rss_bytes", "time/step_ms")
# The HParams table's metric columns, first and in this order in every run. TensorBoard takes
# the columns from one run of a sweep, arbitrarily: these are the ones every task shares.
METRIC_COLUMNS = ("final/loss", "final/val_loss", "final/step_ms", "final/saved_bytes")
# The hparams the presets sweep, marked as differing so that the HParams table, which shows
# five hparams by default, shows them first (else alphabetical: device, dtype, impl, lr, ...).
HPARAM_AXES = ("impl", "task")


class TBLogger:
    """A SummaryWriter on `log_dir`, closed (hence flushed) when the `with` block exits.

    `purge_step` (resuming a run): TensorBoard drops the events the run wrote at that step or
    later before this writer, in its earlier event files."""

    def __init__(self, log_dir: str | Path, purge_step: int | None = None) -> None:
        # Imported here: tensorboard costs ~0.2 s of startup, paid only by runs that log.
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        wait_past_event_files(self.log_dir)
        before = set(self.log_dir.glob("events.out.tfevents.*"))
        self.writer = SummaryWriter(
            log_dir=str(self.log_dir), max_queue=1000, flush_secs=FLUSH_SECONDS,
            purge_step=purge_step,
        )
        new = sorted(set(self.log_dir.glob("events.out.tfevents.*")) - before)
        self.event_file: Path | None = new[-1] if new else None
        self.records = 0  # the records logged to the event file, to say what a lost one held
        self._layout_written = False

    def __enter__(self) -> TBLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Flush every event to disk and close the event file; warn if it was deleted meanwhile
        (its records are lost; TensorBoard writes on into a file no one can open)."""
        try:
            self.flush()
        finally:
            self.writer.close()
        if self.event_file is not None and not _whole(self.event_file):
            log.warning("the event file %s was deleted during the run: up to %d records logged "
                        "to it (scalars, histograms, figures) are lost; the checkpoint and "
                        "figures are not", self.event_file, self.records)

    def flush(self) -> None:
        """Write every event logged so far to disk."""
        self.writer.flush()

    def scalars(self, step: int, values: dict[str, float]) -> None:
        """Log several scalars at `step` (tags as given, e.g. 'loss/train').

        The first record with 'loss/train' also writes the custom-scalars layout of its tags.
        """
        from torch.utils.tensorboard.summary import scalar

        if not self._layout_written and LOSS_TAG in values:
            self.writer.add_custom_scalars(custom_scalars_layout(values))
            self._layout_written = True
        # One event for the record, not one per tag as add_scalar writes: the writer
        # checksums each event in pure Python on its own thread, which competes with the
        # training for the GIL; per-tag events made logging poly3's 2000 steps cost as much
        # CPU as the steps themselves.
        summaries = [scalar(tag, value) for tag, value in values.items()]
        for summary in summaries[1:]:
            summaries[0].value.extend(summary.value)
        self.writer.file_writer.add_summary(summaries[0], step)
        self.records += 1

    def histograms(self, step: int, named: list[tuple[str, torch.Tensor]]) -> None:
        """Histograms of each non-scalar parameter ('weights/<name>') and its gradient
        ('grads/<name>'); scalar parameters have their values logged as 'params/<name>'."""
        for name, p in named:
            if p.ndim == 0:
                continue
            self.writer.add_histogram(f"weights/{name}", p.detach().float().cpu(), step)
            if p.grad is not None:
                self.writer.add_histogram(f"grads/{name}", p.grad.detach().float().cpu(), step)

    def figure(self, tag: str, spec: FigureSpec, step: int, png_path: str | Path) -> None:
        """Draw `spec` into `png_path` and log that PNG as image `tag` at `step`."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        from fitting.track.figures import write_png

        png = write_png(spec, png_path)
        # Logged as written: add_image takes pixels, and would encode them again.
        image = Summary.Image(height=png.height, width=png.width, colorspace=4,
                              encoded_image_string=png.data)
        self.writer.file_writer.add_summary(
            Summary(value=[Summary.Value(tag=tag, image=image)]), step)

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float], step: int) -> None:
        """Log hparams and final metrics (as scalars at `step`) into this run itself.

        SummaryWriter.add_hparams would write them to a new sub-run named by the time.
        The HParams table's metric columns are METRIC_COLUMNS, then the other `metrics`.
        """
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        self.flush()

        # Only the names of the metrics go into the summaries; their values are the scalars.
        columns = dict.fromkeys([*METRIC_COLUMNS, *metrics], 0.0)
        experiment, start, end = hparams_summaries(hparams, columns)
        plugin_data = experiment.value[0].metadata.plugin_data
        data = HParamsPluginData.FromString(plugin_data.content)
        for info in data.experiment.hparam_infos:
            info.differs = info.name in HPARAM_AXES
        plugin_data.content = data.SerializeToString()
        # As add_hparams writes its summaries, but into this run's own event file.
        for summary in (experiment, start, end):
            self.writer.file_writer.add_summary(summary)
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)


def _whole(event_file: Path) -> bool:
    """Whether `event_file` is still the file the writer started: TensorBoard reopens it for
    each write, so a deleted one comes back without the header record that opens it."""
    try:
        with open(event_file, "rb") as f:
            return b"brain.Event:" in f.read(64)
    except OSError:
        return False


def wait_past_event_files(log_dir: Path) -> None:
    """Wait, if need be, until the clock is past the second in which `log_dir`'s newest event
    file was created, so that a new one sorts after it.

    TensorBoard reads a run's event files in name order, and a name is the creation second,
    then host and pid: a run resumed within the second its first writer started (an in-process
    resume) could get a name that sorts first, and TensorBoard would then read the resumed
    steps before the earlier ones."""
    seconds = [int(part) for part in (p.name.split(".")[3] for p in
               log_dir.glob("events.out.tfevents.*")) if part.isdigit()]
    delay = max(seconds, default=0) + 1 - time.time()
    if delay > 0:
        time.sleep(delay)


def custom_scalars_layout(tags: Iterable[str]) -> dict[str, dict[str, list]]:
    """The custom-scalars layout (SummaryWriter.add_custom_scalars) for a run logging `tags`.

    Each chart is a multi-line chart of exact-tag regexes, so in a sweep it overlays that
    metric of every run (custom and builtin). Every run writes the layout of its own tags:
    TensorBoard merges them, so a sweep over tasks gets each task's parameter charts.
    """
    params = [tag for tag in tags if tag.startswith(PARAM_PREFIXES)]
    layout = {
        "loss": {"loss/train, loss/val": _multiline("loss/train", "loss/val")},
        "parameters": {tag: _multiline(tag) for tag in params},
        "cost per step": {tag: _multiline(tag) for tag in COST_TAGS},
        "optimizer": {"optim/grad_norm": _multiline("optim/grad_norm")},
    }
    return {category: charts for category, charts in layout.items() if charts}


def _multiline(*tags: str) -> list:
    """A multi-line chart of exactly these tags ('params/a' must not match 'params/ab')."""
    return ["Multiline", [f"^{re.escape(tag)}$" for tag in tags]]


def param_scalars(named: list[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """'params/<name>' when every parameter is a scalar, else 'weight_norm/<name>' each."""
    if all(p.ndim == 0 for _, p in named):
        return {f"params/{name}": p.item() for name, p in named}
    norms = torch.stack([torch.linalg.vector_norm(p.detach()) for _, p in named]).tolist()
    return {f"weight_norm/{name}": n for (name, _), n in zip(named, norms, strict=True)}


def grad_scalars(named: list[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """'grad_norm/<name>' of each gradient; none when every parameter is a scalar."""
    named = [(name, p) for name, p in named if p.grad is not None]
    if all(p.ndim == 0 for _, p in named):
        return {}
    norms = torch.stack([torch.linalg.vector_norm(p.grad) for _, p in named]).tolist()
    return {f"grad_norm/{name}": n for (name, _), n in zip(named, norms, strict=True)}


def grad_norm(params: list[torch.Tensor]) -> float:
    """The 2-norm of all gradients taken together (0.0 when there is none)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if all(g.ndim == 0 for g in grads):
        return torch.linalg.vector_norm(torch.stack(grads)).item()
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    return torch.linalg.vector_norm(norms).item()
