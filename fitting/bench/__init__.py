"""Benchmarks. Before torch loads: its profiler's USDT lines and the CPU allocator's warning
under the profiler say nothing about a measurement; a user's own setting wins."""

import os

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # USDT lines are level 5
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
