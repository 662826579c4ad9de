"""Data that cannot fit in memory is a config error naming the task's sizes, not a traceback."""

import pytest

from fitting.train.run import run
from fitting.train.validate import ConfigError
from tests.helpers.app_config import make_cfg


def test_data_too_large_for_memory_names_the_task_sizes(tmp_path):
    cfg = make_cfg("task=cnn", "task.n_train=2000000000", "steps=1")
    with pytest.raises(ConfigError, match=r"task=cnn: its data and model do not fit in memory "
                       r"on cpu \(RuntimeError\); use smaller sizes \(task.n_train=2000000000"):
        run(cfg, tmp_path)
    assert not (tmp_path / "checkpoint.pt").exists()
