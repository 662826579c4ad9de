"""profile=true: a Chrome trace of a few steps in the run dir, the top ops in the log."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.train.profile import TRACE
from fitting.train.run import run
from tests.helpers.app_config import make_cfg

MLP = ["task=mlp", "task.n_points=32", "task.n_val=8", "task.hidden=[8]", "log.figure_every=0"]


def messages(caplog) -> str:
    """Every log message so far, one per line."""
    return "\n".join(r.getMessage() for r in caplog.records)


def trace_names(path: Path) -> set[str]:
    """The names of the trace's events (the file must be valid JSON in Chrome's format)."""
    events = json.loads(path.read_text())["traceEvents"]
    return {e["name"] for e in events if "name" in e}


def test_profile_writes_a_trace_with_the_custom_ops_and_logs_the_top_ops(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    run(make_cfg(*MLP, "steps=7", "profile=true", "ops.linear=builtin"), tmp_path)
    names = trace_names(tmp_path / TRACE)
    # Our ReLU's autograd Function by its class name, forward and backward; the builtin
    # Linear as its aten op.
    assert {"ReLUOutputFn", "ReLUOutputFnBackward", "aten::addmm"} <= names
    assert "LinearFn" not in names
    # Steps 0 and 1 skipped and warming up, 2 to 4 recorded.
    steps = {n for n in names if n.startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"}
    log = messages(caplog)
    assert f"profile of 3 steps after 2: trace {tmp_path / TRACE}" in log
    assert "top ops by self CPU time:" in log and "Self CPU time total:" in log
    assert "ReLUOutputFn" in log.split("top ops by self CPU time:")[1]


def test_no_profile_by_default_and_a_run_too_short_says_so(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    run(make_cfg(*MLP, "steps=3"), tmp_path / "off")
    assert not (tmp_path / "off" / TRACE).exists()
    assert "profile=true" not in messages(caplog) and "profile of" not in messages(caplog)
    run(make_cfg(*MLP, "steps=2", "profile=true"), tmp_path / "short")
    assert not (tmp_path / "short" / TRACE).exists()
    assert ("profile=true: the run ended after 2 steps, before the profiled ones (steps 3 to "
            "5); no trace written") in messages(caplog)


def test_profile_and_the_sampled_tensor_peak_take_turns(tmp_path):
    """torch runs one profiler at a time: with profile=true the step's tensor peak (opt-in,
    log.memory_every) is first sampled after the profiled steps, and both are recorded."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fitting.train.profile import PROFILED_STEPS

    run(make_cfg(*MLP, "steps=9", "log.every=1", "log.memory_every=1000", "profile=true"),
        tmp_path)
    assert (tmp_path / TRACE).is_file()
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    events.Reload()
    sampled = [e.step for e in events.Scalars("memory/peak_bytes")]
    assert sampled == [PROFILED_STEPS]
