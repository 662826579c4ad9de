"""Peak memory: a step's tensor peak and the process's peak RSS."""

from __future__ import annotations

import torch

from fitting.track.memory import peak_rss_bytes, step_peak

MIB = 1 << 20


def test_step_peak_is_the_most_bytes_live_at_once_above_the_start():
    kept = torch.empty(4 * MIB)  # live before the block: not counted
    with step_peak("cpu") as peak:
        a = torch.empty(MIB)  # 4 MiB
        b = torch.empty(MIB)  # 8 MiB live at once
        del a, b
        c = torch.empty(MIB // 2)  # 2 MiB: below the peak
        del c
    assert 8 * MIB <= peak.bytes <= 8 * MIB + 64 * 1024
    del kept


def test_peak_rss_is_a_high_water_mark():
    before = peak_rss_bytes()
    x = torch.ones(64 * MIB, dtype=torch.uint8)
    assert peak_rss_bytes() >= max(before, 64 * MIB)
    del x
