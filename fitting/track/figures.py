"""A task's matplotlib Figure, rendered with the Agg canvas (no display) and saved as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fitting.files import write_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def save_png(fig: Figure, path: str | Path) -> np.ndarray:
    """Render `fig`, write it to `path` as a PNG and return its RGBA pixels (height, width, 4)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba()).copy()
    write_atomic(path, lambda f: Image.fromarray(pixels).save(f, format="png"))
    return pixels
