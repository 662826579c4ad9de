"""The app's config composed as `python train.py <overrides>` composes it, through Hydra's
compose API (the schemas registered first)."""

from __future__ import annotations

from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from fitting.config import register

CONF = Path(__file__).resolve().parents[2] / "conf"
# The optimizers that stop once converged (their conf sets stop.patience): lbfgs, newton, lm.
CONVERGING = [p.stem for p in sorted((CONF / "optimizer").glob("*.yaml"))
              if (yaml.safe_load(p.read_text()).get("stop") or {}).get("patience")]


def make_cfg(*overrides: str) -> DictConfig:
    """The app's config composed with `overrides`."""
    register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))
