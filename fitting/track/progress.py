"""Progress of a run: steps done, rate and time left. One updating tqdm line for a single run on
a terminal; a plain line every 10 % of the steps in the run's log file (Hydra's job log), never
on a console that is not a terminal nor on a sweep's, which has a line per job instead."""

import logging
import sys
import time
from contextlib import AbstractContextManager
from typing import TextIO

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from tqdm import tqdm

log = logging.getLogger(__name__)
LINE = "{n_fmt}/{total_fmt} steps ({percentage:.0f}%), {rate_fmt}, {remaining} left{postfix}"


class Progress(AbstractContextManager):
    """Progress over steps `initial`..`total`: a bar on `file` (default stderr) if it is a
    terminal, lines in the log files. `update` costs an int comparison on most steps."""

    def __init__(self, total: int, initial: int = 0, file: TextIO | None = None) -> None:
        file = sys.stderr if file is None else file
        self.total, self.initial, self.loss = total, initial, ""
        sweep = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
        self.bar = (tqdm(total=total, initial=initial, file=file, unit="step", leave=True,
                         dynamic_ncols=True) if file.isatty() and not sweep else None)
        self.tenth = initial * 10 // max(total, 1) + 1  # the next tenth of the steps to log at
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:  # the terminal line ends; a plain log needs no ending
            self.bar.close()

    def update(self, done: int, loss: float | None = None) -> None:
        """`done` steps of `total` are done; `loss`, if given, is shown beside."""
        if loss is not None:
            self.loss = f"loss {loss:.6g}"
        if self.bar is not None:
            if loss is not None:
                self.bar.set_postfix_str(self.loss, refresh=False)
            self.bar.update(done - self.bar.n)
        if done * 10 >= self.tenth * self.total or done == self.total:
            self.tenth = done * 10 // self.total + 1
            line = tqdm.format_meter(done, self.total, time.monotonic() - self.start, unit="step",
                                     initial=self.initial, bar_format=LINE, postfix=self.loss)
            record = log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None)
            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.FileHandler):
                    handler.handle(record)
