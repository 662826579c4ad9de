"""The Hydra callback that ends every sweep (hydra.callbacks in conf/config.yaml): the pairs'
difference runs for TensorBoard, then, once, the command that shows the whole sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


class SweepSummary(Callback):
    """At the end of a sweep: write mine − reference runs (fitting.compare.differences) and
    print the sweep's `tensorboard --logdir` line."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Write the difference runs (a sweep without pairs has none) and print the line."""
        from fitting.compare.differences import sweep_differences
        from fitting.compare.runs_reader import RunsError

        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        try:
            written = sweep_differences(sweep_dir)
        except (RunsError, OSError) as err:  # no finished job to read: nothing to pair
            print(f"no difference runs: {err}", flush=True)
            written = []
        if written:
            print(f"mine − reference of {len(written)} pair(s): {sweep_dir / 'differences'}",
                  flush=True)
        print(f"all jobs of the sweep: tensorboard --logdir {sweep_dir}", flush=True)
