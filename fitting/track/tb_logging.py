"""One TensorBoard run per job: scalars, histograms, figures (also as PNG), hparams and the
custom-scalars layout that overlays the runs of a sweep."""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Iterable
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
# The loss again under its task's name: one chart per task, so that one task's scale (poly3's
# summed loss) never flattens another's when runs of several tasks share a TensorBoard.
TASK_LOSS = "loss_by_task/{task}/{split}"
# What a pair's difference run (fitting.compare) logs: mine minus the reference's loss.
TASK_LOSS_DIFF = "loss_by_task/{task}/train_diff"
# Per-parameter tags: the values of scalar parameters (poly3) or the norms of tensors.
PARAM_PREFIXES = ("params/", "norms/weight/")
# Charts of the "cost per step" category (the memory/peak_* tags: fitting/track/memory.py).
COST_TAGS = ("memory/saved_bytes", "memory/peak_bytes", "memory/peak_rss_bytes", "time/step_ms")
# The HParams table's metric columns: per-step tags every task logs, whose last values are the
# run's final ones (the HParams plugin shows a tag's last value), so no one-point charts. Three
# with short names, so that they fit beside the op choices in a 1600 px window.
METRICS = {"loss/train": "loss", "time/step_ms": "step ms", "memory/saved_bytes": "saved B"}


def _names_event_file(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method`, with the OSError of a failed write naming the event file: TensorBoard's writer
    thread reports one (e.g. a full disk) without the file's name."""

    @functools.wraps(method)
    def wrapper(self: TBLogger, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as err:
            if err.filename is None and self.event_file is not None:
                err.filename = str(self.event_file)
            raise

    return wrapper


class TBLogger:
    """A SummaryWriter on `log_dir`, closed (hence flushed) when the `with` block exits.

    `purge_step` (resuming a run): TensorBoard drops the events the run wrote at that step or
    later before this writer, in its earlier event files."""

    def __init__(
        self, log_dir: str | Path, purge_step: int | None = None, task: str | None = None
    ) -> None:
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
        self.task = task
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

    @_names_event_file
    def close(self) -> None:
        """Flush every event to disk and close the event file; warn if it was deleted meanwhile
        (what was logged before is lost; TensorBoard recreated the file with the rest)."""
        file_writer = self.writer.file_writer
        try:
            self.flush()
        finally:
            try:
                self.writer.close()
            finally:
                # A failed flush leaves TensorBoard's writer thread running: closing the file
                # writer joins it, so a traceback it prints comes before the run's last line.
                file_writer.close()
        if self.event_file is not None and not _whole(self.event_file):
            log.warning("the event file %s was deleted during the run: up to %d records logged "
                        "to it (scalars, histograms, figures) are lost; the checkpoint and "
                        "figures are not", self.event_file, self.records)

    @_names_event_file
    def flush(self) -> None:
        """Write every event logged so far to disk."""
        self.writer.flush()

    @_names_event_file
    def scalars(self, step: int, values: dict[str, float]) -> None:
        """Log several scalars at `step` (tags as given, e.g. 'loss/train').

        The first record with 'loss/train' also writes the custom-scalars layout of its tags.
        """
        from torch.utils.tensorboard.summary import scalar

        if self.task is not None:
            for split in ("train", "val"):
                if f"loss/{split}" in values:
                    values = {**values, TASK_LOSS.format(task=self.task, split=split):
                              values[f"loss/{split}"]}
        if not self._layout_written and LOSS_TAG in values:
            self.writer.add_custom_scalars(custom_scalars_layout(values, self.task))
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

    @_names_event_file
    def histograms(self, step: int, named: list[tuple[str, torch.Tensor]]) -> None:
        """Histograms of each non-scalar parameter ('weights/<name>') and its gradient
        ('weights/<name>.grad'); scalar parameters have their values logged as 'params/<name>'."""
        for name, p in named:
            if p.ndim == 0:
                continue
            self.writer.add_histogram(f"weights/{name}", p.detach().float().cpu(), step)
            if p.grad is not None:
                self.writer.add_histogram(f"weights/{name}.grad", p.grad.detach().float().cpu(),
                                          step)

    @_names_event_file
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

    @_names_event_file
    def hparams(self, hparams: dict[str, Any]) -> None:
        """Declare the run's hparams and the METRICS columns to TensorBoard's HParams plugin, in
        this run itself (SummaryWriter.add_hparams would write a new sub-run). The op choices
        are marked as differing, so the table shows them first."""
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        experiment, start, end = hparams_summaries(hparams, dict.fromkeys(METRICS, 0.0))
        plugin_data = experiment.value[0].metadata.plugin_data
        data = HParamsPluginData.FromString(plugin_data.content)
        for info in data.experiment.hparam_infos:
            info.differs = info.name.startswith("ops.")
        for info in data.experiment.metric_infos:
            info.display_name = METRICS[info.name.tag]
        plugin_data.content = data.SerializeToString()
        for summary in (experiment, start, end):
            self.writer.file_writer.add_summary(summary)


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


def custom_scalars_layout(tags: Iterable[str], task: str | None = None) -> dict[str, dict]:
    """The custom-scalars layout (SummaryWriter.add_custom_scalars) for a run logging `tags`.

    Each chart is a multi-line chart of exact-tag regexes, so in a sweep it overlays that
    metric of every run. The loss charts are per task (one task's scale never flattens
    another's), each beside the chart of mine − reference that `python -m fitting.compare`
    (run at the end of every sweep) logs for each pair: where the two curves coincide, that
    chart shows the difference the overlay hides. Every run writes the layout of its own
    tags, and TensorBoard merges them.
    """
    params = [tag for tag in tags if tag.startswith(PARAM_PREFIXES)]
    loss = {}
    if task is not None:
        train, val = (TASK_LOSS.format(task=task, split=split) for split in ("train", "val"))
        loss = {
            f"{task}: loss/train and loss/val, every run": _multiline(train, val),
            f"{task}: loss/train, mine − reference": _multiline(TASK_LOSS_DIFF.format(task=task)),
        }
    layout = {
        f"loss ({task})" if task else "loss": loss or {
            "loss/train, loss/val": _multiline("loss/train", "loss/val")},
        "parameters": {tag: _multiline(tag) for tag in params},
        "cost per step": {tag: _multiline(tag) for tag in COST_TAGS},
        "optimizer": {"optim/grad_norm": _multiline("optim/grad_norm")},
    }
    return {category: charts for category, charts in layout.items() if charts}


def _multiline(*tags: str) -> list:
    """A multi-line chart of exactly these tags ('params/a' must not match 'params/ab')."""
    return ["Multiline", [f"^{re.escape(tag)}$" for tag in tags]]


def param_scalars(named: list[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """'params/<name>' when every parameter is a scalar, else 'norms/weight/<name>' each."""
    if all(p.ndim == 0 for _, p in named):
        return {f"params/{name}": p.item() for name, p in named}
    norms = torch.stack([torch.linalg.vector_norm(p.detach()) for _, p in named]).tolist()
    return {f"norms/weight/{name}": n for (name, _), n in zip(named, norms, strict=True)}


def grad_scalars(named: list[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """'norms/grad/<name>' of each gradient; none when every parameter is a scalar."""
    named = [(name, p) for name, p in named if p.grad is not None]
    if all(p.ndim == 0 for _, p in named):
        return {}
    norms = torch.stack([torch.linalg.vector_norm(p.grad) for _, p in named]).tolist()
    return {f"norms/grad/{name}": n for (name, _), n in zip(named, norms, strict=True)}


def grad_norm(params: list[torch.Tensor]) -> float:
    """The 2-norm of all gradients taken together (0.0 when there is none)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if all(g.ndim == 0 for g in grads):
        return torch.linalg.vector_norm(torch.stack(grads)).item()
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    return torch.linalg.vector_norm(norms).item()
