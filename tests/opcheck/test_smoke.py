"""`python -m fitting.opcheck` as a user runs it: one real process."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_card_of_the_tutorials_myrelu_from_the_command_line():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "docs" / "examples")}
    proc = subprocess.run([sys.executable, "-m", "fitting.opcheck", "activation",
                           "tutorial_ops:MyReLU", "--no-compile", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ops.activation=tutorial_ops:MyReLU against builtin")
    assert proc.stdout.rstrip().endswith("exit 0: nothing wrong; 1 note (--strict fails on notes)")
