"""The forecast task: values binned into its vocabulary, and the optimizers that fit residuals
(newton, lm: every conf/optimizer whose class has `residuals_at`) refused in one line."""

from pathlib import Path

import pytest
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from tests.tasks.test_tasks import SMALL_FORECAST, build

CONF = Path(__file__).resolve().parents[2] / "conf" / "optimizer"
RESIDUALS = [p.stem for p in sorted(CONF.glob("*.yaml"))
             if hasattr(get_class(OmegaConf.select(OmegaConf.load(p), "optimizer._target_")
                                  or OmegaConf.load(p)._target_), "residuals_at")]


def test_values_are_binned_into_the_vocabulary_and_clipped():
    task = build("forecast", **SMALL_FORECAST)  # 64 bins over [-2, 2]
    values = torch.tensor([-5.0, -2.0, -1.99, 0.0, 1.99, 2.0, 5.0], dtype=torch.float64)
    assert task.tokens(values).tolist() == [0, 0, 0, 32, 63, 63, 63]
    assert task.train_tokens.shape == (64, 9) and task.batch(0)[0].shape == (4, 8)
    assert torch.equal(task.batch(0)[1][:, :-1], task.batch(0)[0][:, 1:])  # the next token


@pytest.mark.parametrize("optimizer", RESIDUALS)
def test_an_optimizer_of_residuals_is_refused_in_one_line(optimizer, tmp_path, train_cli):
    assert RESIDUALS == ["lm", "newton"]
    done = train_cli("task=forecast", f"optimizer={optimizer}", f"hydra.run.dir={tmp_path}/run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr == (f"config error: optimizer={optimizer} fits residuals, and "
                           "task=forecast's loss is a cross-entropy: use adam, sgd, gd or lbfgs\n")
    assert not (tmp_path / "run").exists()
