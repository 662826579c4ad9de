"""Shared fixtures: `device` (every device-agnostic test runs on CPU and, when present, on CUDA),
`one_thread`, and `train_cli` (`python train.py` in the test process); the cpu_kernels marker."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.helpers.train_cli import Finished, run_train

TESTS = Path(__file__).resolve().parent
# Where tests assert numbers (or quoted output) that the CPU's kernels round: bounds set from the
# spread measured with ATEN_CPU_CAPABILITY=default, avx2 and avx512. CI reruns them with
# ATEN_CPU_CAPABILITY=default (`pytest -m cpu_kernels`).
CPU_KERNELS = ("optim/", "tasks/", "models/", "ops/", "train/test_run.py", "compare/test_seeds.py",
               "opcheck/test_docs.py", "test_docs.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests under CPU_KERNELS cpu_kernels."""
    for item in items:
        if Path(item.path).relative_to(TESTS).as_posix().startswith(CPU_KERNELS):
            item.add_marker(pytest.mark.cpu_kernels)


DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """A torch.device: cpu always, cuda when available (skipped otherwise)."""
    return torch.device(request.param)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for the module: on tiny tensors a second thread only adds sync cost
    on a busy 2-core box (10-40x slower, measured for convs and the second-order optimizers)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def train_cli(capfd, monkeypatch) -> Callable[..., Finished]:
    """`train_cli(*args)`: `python train.py *args` run in this test's process (see
    tests/helpers/train_cli.py), its exit status, stdout and stderr."""
    return lambda *args: run_train(list(args), capfd, monkeypatch)
