"""Shared fixtures: `device` (every device-agnostic test runs on CPU and, when present, on CUDA),
`one_thread`, and `train_cli` (`python train.py` in the test process)."""

from collections.abc import Callable

import pytest
import torch

from tests.helpers.train_cli import Finished, run_train

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
