"""The app's config composed as `python train.py <overrides>` composes it, through Hydra's
compose API (the schemas registered first)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from fitting.config import register

CONF = Path(__file__).resolve().parents[2] / "conf"


def make_cfg(*overrides: str) -> DictConfig:
    """The app's config composed with `overrides`."""
    register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))
