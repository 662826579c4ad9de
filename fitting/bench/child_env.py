"""The environment of a benchmark's child process under an allocator policy.

A replacement malloc (mimalloc from its pip package; jemalloc or tcmalloc when the system has
them) must be preloaded when the process starts; glibc's policies are set by the child itself,
the way the app sets them (fitting.train.allocator), so its environment holds no
MALLOC_*_THRESHOLD_ that would override them.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

from fitting.train.allocator import MALLOPT, PRELOADED, THRESHOLD_ENV, library_path, preload_hint

# System allocators (found by ctypes.util.find_library), with the Debian package that has them.
SYSTEM_PRELOADS = {
    "jemalloc": ("jemalloc", "libjemalloc2"),
    "tcmalloc": ("tcmalloc_minimal", "libtcmalloc-minimal4"),
}
BENCH_POLICIES = (*MALLOPT, *PRELOADED, *SYSTEM_PRELOADS)
_REPLACEMENTS = ("jemalloc", "tcmalloc", "mimalloc")


def env_for(policy: str) -> dict[str, str]:
    """A copy of os.environ that starts a child process under allocator `policy`.

    ValueError for an unknown policy or a replacement allocator that is not installed.
    """
    env = {k: v for k, v in os.environ.items() if k not in THRESHOLD_ENV}
    # Whatever the parent preloaded as malloc must not leak into another policy's measurement.
    kept = [p for p in env.pop("LD_PRELOAD", "").split() if not any(r in p for r in _REPLACEMENTS)]
    if policy in PRELOADED:
        lib = library_path(policy)
        if lib is None:
            raise ValueError(f"env_for: {preload_hint(policy)}")
        kept.insert(0, lib)
    elif policy in SYSTEM_PRELOADS:
        name, package = SYSTEM_PRELOADS[policy]
        lib = ctypes.util.find_library(name)
        if lib is None:
            raise ValueError(f"env_for: {policy} is not installed (Debian: {package})")
        kept.insert(0, lib)
    elif policy not in MALLOPT:
        choices = ", ".join(BENCH_POLICIES)
        raise ValueError(f"env_for: policy must be one of {choices}, got {policy!r}")
    if kept:
        env["LD_PRELOAD"] = " ".join(kept)
    return env


def child_policy(policy: str) -> str:
    """The `--allocator` a child takes under `policy` (a system preload runs as 'default')."""
    return "default" if policy in SYSTEM_PRELOADS else policy


def run_child(module: str, args: list[str], policy: str) -> dict:
    """Run `python -m module *args` under allocator `policy`; its last stdout line as JSON.

    ValueError when the policy cannot be had here, RuntimeError when the child fails."""
    env = env_for(policy)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", module, *args, "--allocator", child_policy(policy)]
    out = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd[1:])} under {policy!r} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
