"""Peak memory per step: the tensor peak (profiler records on CPU, CUDA's allocator stats), the
process's peak RSS, which steps are sampled, and what a run logs and reports."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fitting.config  # noqa: F401  (registers the schemas)
from fitting.bench.cnn_step import training_step
from fitting.track.memory import (
    PEAK_TAG,
    RSS_TAG,
    StepMemory,
    human_bytes,
    step_peak,
)
from fitting.train.run import run

CONF = Path(__file__).resolve().parents[2] / "conf"
MIB = 1 << 20


def test_step_peak_is_the_most_bytes_live_at_once(device):
    with step_peak(device) as peak:
        a = torch.empty(MIB, device=device)  # 4 MiB
        b = torch.empty(MIB, device=device)  # 8 MiB live
        del a, b
        c = torch.empty(MIB // 2, device=device)  # 2 MiB: below the peak
        del c
    assert 8 * MIB <= peak.bytes <= 8 * MIB + 64 * 1024


def test_step_peak_counts_above_what_was_live_before(device):
    kept = torch.empty(4 * MIB, device=device)  # 16 MiB before the block: not counted
    with step_peak(device) as peak:
        d = torch.ones(MIB, device=device) * 2  # two 4 MiB tensors at once
        del d
    assert 8 * MIB <= peak.bytes <= 8 * MIB + 64 * 1024
    del kept


def cnn_step_peaks(batch: int) -> dict[str, int]:
    """impl -> the tensor peak of one cnn training step at `batch` (after adam's first step)."""
    peaks = {}
    for impl in ("custom", "builtin"):
        step = training_step(impl, batch=batch)
        step()  # adam's state
        with step_peak("cpu") as peak:
            step()
        peaks[impl] = peak.bytes
    return peaks


def test_custom_cnn_step_peaks_below_the_builtin(one_thread):
    """The fused conv-BN's recompute shows in the step's tensor peak (not only saved bytes)."""
    peaks = cnn_step_peaks(batch=128)
    # Layer 1's activations alone are 4 MiB at batch 128.
    assert peaks["builtin"] > 12 * MIB
    assert peaks["custom"] / peaks["builtin"] < 0.9


def test_cnn_step_peak_at_batch_1024_is_at_most_0_8_of_the_builtin(one_thread):
    """The target as a user meets it: a whole training step of the cnn at batch 1024, where the
    fused op's backward runs in slices (models/ops/conv_bn_backward.py)."""
    peaks = cnn_step_peaks(batch=1024)
    assert peaks["builtin"] > 100 * MIB
    assert peaks["custom"] / peaks["builtin"] <= 0.8


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS/VmHWM: Linux's /proc")
def test_peak_rss_grows_with_touched_memory_and_matches_vmhwm():
    """In a fresh process (this one's peak is whatever earlier tests reached): 64 MiB written
    put the peak 64 MiB above the resident memory before, and not more: the child does not
    report this (bigger) process's peak, as ru_maxrss would after exec."""
    ballast = torch.ones(128 << 20, dtype=torch.uint8)  # this process: bigger than the child
    code = (
        "from fitting.track.memory import peak_rss_bytes as p\n"
        "def vm(key): return [int(l.split()[1]) * 1024 for l in open('/proc/self/status')"
        " if l.startswith(key)][0]\n"
        "rss = vm('VmRSS'); x = b'x' * (64 << 20); print(rss, p(), vm('VmHWM'))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, check=True)  # fmt: skip
    rss_before, peak, hwm = map(int, out.stdout.split())
    del ballast
    assert peak - rss_before >= 63 * MIB
    assert peak - rss_before <= 80 * MIB
    assert abs(peak - hwm) <= 2 * MIB


def test_sampled_steps_are_logged_steps_from_step_one_then_every_n():
    memory = StepMemory(torch.device("cpu"), every=10)
    logged = {0, 3, 6, 9, 12, 15, 18, 21, 24}
    for step in range(25):
        with memory.measure(step, step in logged):
            torch.empty(1024)
    assert sorted(memory.peaks) == [3, 12, 21]
    assert set(memory.scalars(12)) == {PEAK_TAG, RSS_TAG}
    assert set(memory.scalars(15)) == {RSS_TAG}
    assert max(memory.peaks.values()) >= 4096


def test_every_zero_samples_no_step():
    """The tensor peak is opt-in (log.memory_every): by default no step runs under the
    profiler, and only the peak RSS is logged."""
    memory = StepMemory(torch.device("cpu"), every=0)
    for step in range(5):
        with memory.measure(step, True):
            pass
    assert memory.peaks == {}
    assert set(memory.scalars(1)) == {RSS_TAG}


def test_human_bytes():
    assert [human_bytes(n) for n in (900, 40_000, 3 * MIB, 3 * 2**30)] == [
        "900 B", "39.1 KiB", "3.0 MiB", "3.00 GiB"]


def test_a_run_logs_and_reports_its_peaks(tmp_path, caplog):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[
            "task=cnn", "steps=7", "task.n_train=64", "task.n_val=16", "task.batch_size=16",
            "log.every=2", "log.memory_every=4",
        ])  # fmt: skip
    with caplog.at_level(logging.INFO, logger="fitting.train"):
        run(cfg, tmp_path)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    peaks = {e.step: e.value for e in acc.Scalars(PEAK_TAG)}
    rss = {e.step: e.value for e in acc.Scalars(RSS_TAG)}
    assert sorted(peaks) == [2, 4]  # logged: 0, 2, 4, 6; sampled: the first after 0, then 4+
    assert all(v > 16 * 8 * 32 * 32 * 4 for v in peaks.values())  # > layer 1's output
    assert sorted(rss) == [0, 2, 4, 6] and all(v > 0 for v in rss.values())
    assert rss[6] >= rss[0]  # a high-water mark
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("memory: process peak RSS ") for m in lines)


def test_a_run_without_memory_every_logs_no_tensor_peak(tmp_path):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["steps=3", "log.every=1", "log.figure_every=0"])
    run(cfg, tmp_path)
    tags = EventAccumulator(str(tmp_path)).Reload().Tags()["scalars"]
    assert RSS_TAG in tags and PEAK_TAG not in tags
