import os

# Before torch loads: its profiler's USDT lines (profile=true, the benchmarks) and the CPU
# allocator's warning under it say nothing to a user; a user's own setting wins.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # USDT lines are level 5
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
