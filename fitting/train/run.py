"""The app as a plain function: `run(cfg, out_dir) -> final loss`, callable without Hydra."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from fitting.checks import ConfigError
from fitting.track.figure_worker import figure_drawer
from fitting.train.allocator import AllocatorError, apply_allocator
from fitting.train.validate import validate

if TYPE_CHECKING:
    from fitting.config import Config

log = logging.getLogger(__name__)


def run(cfg: Config, out_dir: str | Path) -> float:
    """Train as `cfg` (a config composed from conf/) says, writing the TensorBoard run, figures
    and checkpoint.pt to `out_dir`; return the final training loss (that of the last step, as
    the tutorial prints it).

    Out-of-range values raise ConfigError before anything is built. With `cfg.resume` (a run
    dir, which must be `out_dir`) the run continues from its checkpoint. A run stopped by a
    signal or a non-finite loss raises RunStopped (Interrupted, Diverged) after saving."""
    validate(cfg)
    try:  # before torch allocates: a malloc policy applies to the blocks allocated after it
        log.info("allocator: %s", apply_allocator(cfg.allocator.value))
    except AllocatorError as err:
        raise ConfigError(str(err)) from err
    # Started before torch loads: the worker imports matplotlib on another core meanwhile,
    # and is ready for the run's first figure.
    figure_drawer()
    # Imported once the config is valid: a config error answers before torch loads.
    from fitting.train.session import train

    return train(cfg, Path(out_dir).resolve())
