"""The allocator policy (config key `allocator`): what each does to glibc's malloc, measured in
fresh processes (malloc settings are per process and cannot be undone), and its errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fitting.bench.child_env import env_for
from fitting.config import Allocator, Config
from fitting.train.allocator import (
    DEFAULT_POLICY,
    POLICIES,
    AllocatorError,
    apply_allocator,
    glibc_version,
    library_path,
)

ROOT = Path(__file__).resolve().parents[2]
needs_glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or glibc_version() is None, reason="glibc's mallopt"
)

# Allocates 8 MiB, frees it, allocates 8 MiB again: prints the policy line and how many bytes
# of the second block glibc mapped with mmap (mallinfo2's hblkhd).
MAPPED_PROBE = """
import ctypes, sys
from fitting.train.allocator import apply_allocator
print(apply_allocator(sys.argv[1]))
libc = ctypes.CDLL(None)
names = ("arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost").split()
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in names]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(8 << 20))
before = libc.mallinfo2().hblkhd
block = libc.malloc(8 << 20)
print(libc.mallinfo2().hblkhd - before)
"""


def probe(policy: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", MAPPED_PROBE, policy], cwd=ROOT,
                         env=env or env_for("default"), capture_output=True, text=True,
                         check=True)  # fmt: skip
    line, mapped = out.stdout.strip().splitlines()
    return line, int(mapped)


def test_config_choices_are_the_policies():
    assert [a.value for a in Allocator] == list(POLICIES)
    assert Config().allocator.value == DEFAULT_POLICY


@needs_glibc
@pytest.mark.parametrize(
    ("policy", "mapped"),
    # default: glibc raised its threshold to the freed 8 MiB block, so the next comes from the
    # heap; mmap: a fixed 4 MiB threshold maps it again; tuned: 256 MiB, never mapped.
    [("default", False), ("mmap", True), ("tuned", False)],
)
def test_policy_decides_which_blocks_glibc_maps(policy, mapped):
    line, mapped_bytes = probe(policy)
    assert f"allocator={policy}" in line
    assert (mapped_bytes >= 8 << 20) is mapped


@needs_glibc
def test_threshold_env_vars_win_over_the_policy():
    env = {**env_for("default"), "MALLOC_MMAP_THRESHOLD_": str(64 << 20)}
    line, mapped_bytes = probe("mmap", env)
    assert line.endswith(f"MALLOC_MMAP_THRESHOLD_={64 << 20}") and mapped_bytes == 0


@needs_glibc
def test_a_policy_cannot_be_undone_in_the_same_process():
    code = (
        "from fitting.train.allocator import apply_allocator as a, AllocatorError\n"
        "a('default'); a('mmap'); a('mmap')\n"
        "try:\n    a('default')\nexcept AllocatorError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env_for("default"),
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == (
        "allocator=default: this process already runs under allocator=mmap (malloc settings"
        " cannot be undone); run it in a new process"
    )


def test_unknown_policy():
    with pytest.raises(AllocatorError, match="allocator must be one of default, mmap, tuned, "
                                             "mimalloc, got 'fast'"):
        apply_allocator("fast")


@needs_glibc
def test_mimalloc_needs_preloading_and_says_how():
    lib = library_path("mimalloc")
    assert lib is not None, "cmeel-mimalloc is a test dependency (pyproject.toml)"
    code = (
        "from fitting.train.allocator import apply_allocator as a, AllocatorError\n"
        "try:\n    a('mimalloc')\nexcept AllocatorError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env_for("default"),
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == (
        "allocator=mimalloc replaces malloc, which must happen before the process starts: "
        f"LD_PRELOAD={lib} python train.py ..."
    )
    line, _ = probe("mimalloc", env_for("mimalloc"))
    assert line == "mimalloc malloc (preloaded)"


@pytest.mark.slow
@needs_glibc
def test_app_without_preloaded_mimalloc_is_a_config_error(tmp_path):
    cmd = [sys.executable, "train.py", "allocator=mimalloc", "steps=1",
           f"hydra.run.dir={tmp_path}"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, env=env_for("default"), capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=300)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"config error: allocator=mimalloc replaces malloc, which must happen before the "
        f"process starts: LD_PRELOAD={library_path('mimalloc')} python train.py ..."
    ]
