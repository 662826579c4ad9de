"""Progress as a user sees it: plain lines with rate and time left in the run's log file, one
updating tqdm line for a single run on a terminal, nothing on any other console."""

from __future__ import annotations

import io
import logging
import re

import pytest

from fitting.track.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def job_log(tmp_path):
    """The run's log file, as Hydra's job logging adds it: its lines, read after the run."""
    handler = logging.FileHandler(tmp_path / "train.log")
    logging.getLogger().addHandler(handler)
    yield lambda: (tmp_path / "train.log").read_text().splitlines()
    logging.getLogger().removeHandler(handler)
    handler.close()


def test_plain_lines_every_tenth_in_the_log_file_none_on_a_console_not_a_terminal(
        job_log, caplog):
    console = io.StringIO()  # a pipe, a SLURM job's output
    with caplog.at_level(logging.INFO, logger="fitting.track.progress"):
        with Progress(200, file=console) as progress:
            for done in range(1, 201):
                progress.update(done, loss=1.5 if done == 100 else None)
    assert console.getvalue() == "" and caplog.records == []
    lines = job_log()
    assert len(lines) == 10
    assert re.fullmatch(r"20/200 steps \(10%\), [\d.]+step/s, \d\d:\d\d left", lines[0])
    assert lines[4].startswith("100/200 steps (50%)") and lines[4].endswith(", loss 1.5")
    assert lines[-1].startswith("200/200 steps (100%)")


def test_a_resumed_run_counts_from_where_it_was(job_log):
    with Progress(100, initial=50, file=io.StringIO()) as progress:
        for done in range(51, 101):
            progress.update(done)
    assert [line.split()[0] for line in job_log()] == ["60/100", "70/100", "80/100", "90/100",
                                                   "100/100"]


def test_one_updating_line_on_a_terminal_and_plain_lines_in_the_log_file(caplog, tmp_path):
    terminal, job_log = Terminal(), logging.FileHandler(tmp_path / "train.log")
    logging.getLogger().addHandler(job_log)  # as Hydra's job logging does
    try:
        with caplog.at_level(logging.INFO, logger="fitting.track.progress"):
            with Progress(50, file=terminal) as progress:
                for done in range(1, 51):
                    progress.update(done, loss=0.25)
    finally:
        logging.getLogger().removeHandler(job_log)
        job_log.close()
    logged = (tmp_path / "train.log").read_text().splitlines()
    assert len(logged) == 10 and logged[-1].startswith("50/50 steps (100%)")
    out = terminal.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n")  # one line, redrawn with \r
    assert "\r" in out
    last = out.rsplit("\r", 1)[-1]
    assert "50/50" in last and "step/s" in last and "loss 0.25" in last
    assert caplog.records == []  # no console lines beside the bar


def test_a_sweeps_job_draws_no_bar_its_log_file_has_the_lines(tmp_path, caplog):
    """A sweep's console has a line per job (fitting.compare's callback), no job's progress."""
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    terminal, job_log = Terminal(), logging.FileHandler(tmp_path / "train.log")
    HydraConfig.instance().set_config(
        OmegaConf.create({"hydra": OmegaConf.structured(HydraConf(mode=RunMode.MULTIRUN))}))
    logging.getLogger().addHandler(job_log)
    try:
        with caplog.at_level(logging.INFO, logger="fitting.track.progress"), \
                Progress(50, file=terminal) as progress:
            for done in range(1, 51):
                progress.update(done)
    finally:
        HydraConfig.instance().cfg = None
        logging.getLogger().removeHandler(job_log)
        job_log.close()
    assert terminal.getvalue() == ""
    assert len((tmp_path / "train.log").read_text().splitlines()) == 10
