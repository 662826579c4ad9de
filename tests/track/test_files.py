"""Derived files written whole (fitting.track.files): a writer that fails or is killed midway leaves the
old file or differences/ whole, and no entry that TensorBoard would list as a run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fitting.compare import report
from fitting.track import files
from tests.compare.sweeps import LOSSES, write_run

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# compare, killed by SIGKILL as it copies the second event file into the new differences/.
KILLED = """
import os, shutil, signal, sys
copied = []
def copyfile(src, dst, **kwargs):
    copied.append(dst)
    if len(copied) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, **kwargs)
real, shutil.copyfile = shutil.copyfile, copyfile
from fitting.compare.report import main
main([sys.argv[1]])
"""


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "results.json"
    files.write_atomic(path, b"old")

    def half(f):
        f.write(b"ne")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        files.write_atomic(path, half)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["results.json"]
    files.write_atomic(path, lambda f: f.write(b"new"))
    assert path.read_bytes() == b"new" and oct(path.stat().st_mode & 0o777) == "0o644"


def runs_in(differences) -> dict[str, list[str]]:
    """Each run dir under differences/ and its files (what TensorBoard would list)."""
    return {d: sorted(os.listdir(differences / d)) for d in sorted(os.listdir(differences))}


@pytest.fixture
def sweep(tmp_path):
    for seed in range(3):
        write_run(tmp_path / f"{2 * seed}_mine", seed=seed, losses=LOSSES + seed + 1)
        write_run(tmp_path / f"{2 * seed + 1}_ref", seed=seed, activation="builtin")
    report.report(str(tmp_path))
    before = runs_in(tmp_path / "differences")
    assert len(before) == 4 and all(len(names) == 1 for names in before.values())
    return tmp_path, before


def test_a_compare_that_fails_midway_leaves_the_old_differences_whole(sweep, monkeypatch):
    root, before = sweep
    real, copied = files.shutil.copyfile, []

    def full_disk(src, dst, **kwargs):
        copied.append(dst)
        if len(copied) == 2:  # the second run's event file
            raise OSError(28, "No space left on device")
        return real(src, dst, **kwargs)

    monkeypatch.setattr(files.shutil, "copyfile", full_disk)
    (root / "differences" / "0_mine_minus_1_ref").rename(root / "differences" / "kept")
    with pytest.raises(OSError, match="No space"):
        report.report(str(root))
    assert runs_in(root / "differences") == {"kept" if k.startswith("0_") else k: v
                                             for k, v in before.items()}
    assert sorted(p for p in os.listdir(root) if not p[0].isdigit()) == ["compare.md",
                                                                           "compare.png",
                                                                           "differences"]


@pytest.mark.slow
def test_a_compare_killed_midway_leaves_the_old_differences_and_the_next_cleans_up(sweep):
    root, before = sweep
    killed = subprocess.run([sys.executable, "-c", KILLED, str(root)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert runs_in(root / "differences") == before  # all 3, untouched
    stale = [p for p in os.listdir(root) if p.startswith(".differences")]
    assert stale == [".differences.new"]  # half a copy: TensorBoard lists it until ...
    report.report(str(root))  # ... the next compare
    assert runs_in(root / "differences").keys() == before.keys()
    assert [p for p in os.listdir(root) if p.startswith(".")] == []
