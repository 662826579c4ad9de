"""fitting.train.run: the figure worker starts before torch loads, and the run draws with it."""

import subprocess
import sys

from tests.helpers.train_cli import REPO, TRAIN, user_env

# train.py as a user runs it, printing whether torch was loaded when the run started its figure
# worker, and whether that worker is still the process's at the end (the logger used it).
RECORDING_RUN = """
import runpy, sys
import fitting.track.figure_worker as figure_worker
import fitting.train.run as run_module

started = []
def recording_drawer():
    started.append(("torch" in sys.modules, figure_worker.figure_drawer()))
    return started[-1][1]
run_module.figure_drawer = recording_drawer
sys.argv = [sys.argv[1], "steps=3", "hydra.run.dir=" + sys.argv[2]]
runpy.run_path(sys.argv[0], run_name="__main__")
print([torch_loaded for torch_loaded, _ in started], started[0][1] is figure_worker._drawer)
"""


def test_a_run_starts_its_figure_worker_before_torch_loads(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", RECORDING_RUN, TRAIN, str(tmp_path / "run")],
        cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[False] True"
    assert (tmp_path / "run" / "fit_step000003.png").exists()
