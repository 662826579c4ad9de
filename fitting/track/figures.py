"""The figures of a fit, drawn from plain data (NumPy arrays, strings): matplotlib only.

No torch here: the tasks turn their tensors into a FigureSpec, and this module draws it with
matplotlib's Agg canvas (no display needed), imported when the first figure is drawn.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class Png(NamedTuple):
    """An encoded PNG image and its size in pixels."""

    data: bytes
    height: int
    width: int


class FigureSpec(NamedTuple):
    """What to draw: `kind` names a function of this module, `data` its keyword arguments."""

    kind: str
    data: dict[str, Any]


def line_fit(
    x: Any, target: Any, pred: Any, title: str, target_label: str,
    points: tuple[Any, Any] | None = None, color: str = "C0", legend: str = "upper left",
) -> Figure:
    """A 1-D fit: the target curve, the prediction, optionally the training points."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    if points is not None:
        ax.scatter(*points, s=6, color="0.6", label="training points")
    ax.plot(x, target, linewidth=2.5, color="0.7", label=target_label)
    ax.plot(x, pred, color=color, label="prediction")
    ax.set(xlabel="x", ylabel="y", title=title)
    ax.legend(loc=legend)
    ax.grid(alpha=0.3)
    return fig


def curve_images(
    images: Any, cols: Any, true_rows: Any, pred_rows: Any, true: Any, pred: Any,
    names: tuple[str, ...], title: str,
) -> Figure:
    """Images with their true and predicted curves (top), predicted vs true parameters
    (bottom, one panel per parameter)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 5.2))
    n = len(names)
    axes = fig.subplots(2, n)
    size = images.shape[-1]
    for i, ax in enumerate(axes[0]):
        ax.imshow(images[i], cmap="gray", vmin=-0.3, vmax=1.3)
        ax.plot(cols, true_rows[i], "-", linewidth=1.2, label="true")
        ax.plot(cols, pred_rows[i], "--", linewidth=1.2, label="predicted")
        ax.set(xticks=[], yticks=[], ylim=(size - 0.5, -0.5))
    axes[0][0].legend(loc="lower left", fontsize=7)
    for j, ax in enumerate(axes[1]):
        ax.scatter(true[:, j], pred[:, j], s=4, alpha=0.5)
        lo, hi = float(true[:, j].min()), float(true[:, j].max())
        ax.plot([lo, hi], [lo, hi], color="0.5", linewidth=1)
        ax.set(xlabel=f"true {names[j]}", ylabel=f"predicted {names[j]}")
    fig.suptitle(title)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.1, top=0.92, wspace=0.45, hspace=0.3)
    return fig


KINDS = {"line_fit": line_fit, "curve_images": curve_images}


def draw(spec: FigureSpec) -> Figure:
    """The matplotlib Figure that `spec` describes."""
    try:
        fn = KINDS[spec.kind]
    except KeyError:
        raise ValueError(
            f"figures: unknown figure kind {spec.kind!r}; one of {list(KINDS)}"
        ) from None
    return fn(**spec.data)


def write_png(spec: FigureSpec, path: str | Path) -> Png:
    """Draw `spec`, write it to `path` as PNG and return that PNG (RGBA), which TensorBoard
    logs as it is: encoded once, the same bytes in the file and in the run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(draw(spec))
    buffer = io.BytesIO()
    canvas.print_png(buffer)
    png = buffer.getvalue()
    # Written whole or not at all: a full disk leaves no empty or torn PNG behind.
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(png)
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        err.filename = err.filename or str(path)
        raise
    width, height = canvas.get_width_height(physical=True)
    return Png(png, height, width)
