"""The CPU heap allocator policy of a run (config key `allocator`), set once at start-up.

PyTorch's CPU tensors come from malloc. glibc's malloc serves a block of at least its mmap
threshold with a fresh mmap (returned to the OS on free) and smaller ones from its heap; by
default that threshold rises to the size of each mapped block freed, so after the first step
a training step's activations come from the heap, whose freed holes stay resident and fragment
as allocation patterns shift. The policies (measured in docs/benchmarks.md):

- `mmap`: a fixed mmap threshold (MMAP_THRESHOLD), so big activations are mapped on demand and
  returned on free: the process's resident memory follows its live tensors. Blocks below it
  come from the heap, whose free top is kept (MMAP_TRIM) rather than returned and faulted in
  again every step.
- `default`: glibc as shipped (dynamic threshold).
- `tuned`: thresholds raised to 256 MiB: everything from the heap and nothing returned, fewest
  page faults, most resident memory.
- `mimalloc`: Microsoft's mimalloc (pip install cmeel-mimalloc), which must replace malloc
  before the process starts: LD_PRELOAD=<its libmimalloc.so> python train.py ...

`mmap` is the default because it is the policy under which a smaller live peak (the fused
conv-BN's) reliably becomes a smaller peak RSS at large batches. Its price is CPU time at large
batches, where every big buffer is page-faulted in afresh; at the cnn's default batch its
activations stay below the threshold and it runs as fast as `tuned`. `tuned` is the fastest
at large batches and holds the most memory.
"""

from __future__ import annotations

import ctypes
import os
import sys
from importlib import metadata

# mallopt() parameter numbers from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# 4 MiB: the cnn's activations at large batches (each >= 4 MiB from batch 128 on) are mapped on
# demand; at its default batch of 64 they (and every smaller block) stay in the heap. A lower
# threshold maps those too, and page-faults them in afresh every step: 2.5x the step time of
# the default cnn run for no smaller peak RSS (docs/benchmarks.md).
MMAP_THRESHOLD = 4 << 20
# The heap's free top kept rather than returned: with a fixed mmap threshold glibc would
# otherwise trim it at 128 KiB and fault it back in every step.
MMAP_TRIM = 256 << 20
# 256 MiB: every tensor of these CPU training steps comes from (and returns to) the heap, and
# at most 256 MiB of free memory is kept at the heap's top.
TUNED_THRESHOLD = 256 << 20
THRESHOLD_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
# policy -> (mmap threshold, trim threshold) for mallopt; None: leave glibc as it is.
MALLOPT = {
    "default": None,
    "mmap": (MMAP_THRESHOLD, MMAP_TRIM),
    "tuned": (TUNED_THRESHOLD, TUNED_THRESHOLD),
}
# policy -> (pip distribution, its shared library): allocators that replace malloc.
PRELOADED = {"mimalloc": ("cmeel-mimalloc", "cmeel.prefix/lib/libmimalloc.so")}
POLICIES = (*MALLOPT, *PRELOADED)
DEFAULT_POLICY = "mmap"
_REPLACEMENTS = ("jemalloc", "tcmalloc", "mimalloc")

_applied: str | None = None  # the policy this process set (mallopt cannot be undone)


class AllocatorError(ValueError):
    """An allocator policy this process cannot run under; the message says how to get it."""


def glibc_version() -> str | None:
    """The running glibc's version ('2.36'), or None when the C library is not glibc."""
    try:
        fn = ctypes.CDLL(None).gnu_get_libc_version
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_char_p
    return fn().decode()


def preloaded_allocator() -> str | None:
    """'jemalloc', 'tcmalloc' or 'mimalloc' when one replaces malloc in this process, else None."""
    try:
        with open("/proc/self/maps") as maps:
            loaded = maps.read()
    except OSError:
        loaded = os.environ.get("LD_PRELOAD", "")
    return next((name for name in _REPLACEMENTS if f"lib{name}" in loaded), None)


def library_path(policy: str) -> str | None:
    """The shared library of a replacement allocator `policy`, None if its package is missing."""
    dist, rel = PRELOADED[policy]
    try:
        path = metadata.distribution(dist).locate_file(rel)
    except metadata.PackageNotFoundError:
        return None
    return str(path) if os.path.exists(path) else None


def apply_allocator(policy: str) -> str:
    """Put this process under allocator `policy` (see POLICIES); return one line saying what
    it runs under. Raises AllocatorError for a policy that cannot be had here.

    The mallopt policies apply to blocks allocated afterwards, so call this before the run's
    tensors exist. MALLOC_*_THRESHOLD_ in the environment or a preloaded allocator is an
    explicit choice made at start-up and wins over a mallopt policy.
    """
    global _applied
    if policy not in POLICIES:
        raise AllocatorError(f"allocator must be one of {', '.join(POLICIES)}, got {policy!r}")
    preloaded = preloaded_allocator()
    if policy in PRELOADED:
        if preloaded != policy:
            raise AllocatorError(preload_hint(policy))
        return f"{policy} malloc (preloaded)"
    if preloaded or _env_thresholds() or glibc_version() is None:
        return describe_allocator()
    if _applied not in (None, "default", policy):
        raise AllocatorError(
            f"allocator={policy}: this process already runs under allocator={_applied} (malloc"
            " settings cannot be undone); run it in a new process"
        )
    thresholds = MALLOPT[policy]
    if thresholds is not None and _applied != policy:
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mmap_threshold, trim_threshold = thresholds
        # Each returns 1 on success; glibc refuses values it cannot honour.
        ok = mallopt(M_MMAP_THRESHOLD, mmap_threshold)
        if ok and trim_threshold is not None:
            ok = mallopt(M_TRIM_THRESHOLD, trim_threshold)
        if not ok:
            raise AllocatorError(f"allocator={policy}: glibc refused mallopt{thresholds}")
    _applied = policy
    return describe_allocator()


def preload_hint(policy: str) -> str:
    """How to start a process under the replacement allocator `policy`."""
    path = library_path(policy)
    if path is None:
        dist = PRELOADED[policy][0]
        return f"allocator={policy} needs its library: pip install {dist}, then preload it"
    return (
        f"allocator={policy} replaces malloc, which must happen before the process starts: "
        f"LD_PRELOAD={path} python train.py ..."
    )


def allocator_setting() -> str:
    """The policy this process runs under: a POLICIES name, 'jemalloc'/'tcmalloc' when one is
    preloaded, 'env' for MALLOC_*_THRESHOLD_ variables, or 'not glibc'."""
    preloaded = preloaded_allocator()
    if preloaded:
        return preloaded
    if glibc_version() is None:
        return "not glibc"
    if _env_thresholds():
        return "env"
    return _applied or "default"


def describe_allocator() -> str:
    """One line saying which allocator and settings this process runs under."""
    setting = allocator_setting()
    if setting in PRELOADED or setting in _REPLACEMENTS:
        return f"{setting} malloc (preloaded)"
    if setting == "not glibc":
        return "system malloc (not glibc)"
    if setting == "env":
        env = " ".join(f"{k}={v}" for k, v in _env_thresholds().items())
        return f"glibc {glibc_version()} malloc, {env}"
    thresholds = MALLOPT[setting]
    how = "default thresholds" if thresholds is None else f"mallopt mmap/trim {thresholds}"
    return f"glibc {glibc_version()} malloc, allocator={setting} ({how})"


def _env_thresholds() -> dict[str, str]:
    """The MALLOC_*_THRESHOLD_ environment variables glibc read at start-up, if set."""
    return {k: os.environ[k] for k in THRESHOLD_ENV if k in os.environ}


def is_linux_glibc() -> bool:
    """Whether the mallopt policies can take effect here."""
    return sys.platform.startswith("linux") and glibc_version() is not None
