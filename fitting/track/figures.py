"""A task's matplotlib Figure, rendered with the Agg canvas (no display) and saved as a PNG."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def save_png(fig: Figure, path: str | Path) -> np.ndarray:
    """Render `fig`, write it to `path` as a PNG and return its RGBA pixels (height, width, 4)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba()).copy()
    # Written whole or not at all: a full disk or a kill leaves no torn PNG behind.
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        Image.fromarray(pixels).save(tmp, format="png")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return pixels
