"""Hydra callbacks of the app (hydra.callbacks in conf/config.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


class SweepSummary(Callback):
    """At the end of a sweep, once: the command that shows all its jobs in TensorBoard."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Print the sweep's `tensorboard --logdir` line."""
        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        print(f"all jobs of the sweep: tensorboard --logdir {sweep_dir}", flush=True)
