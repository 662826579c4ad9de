"""Entry point: `python train.py [overrides]`; see `python train.py --help`."""

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import fitting.config  # noqa: F401  (registers the config schemas before Hydra composes)
from fitting.run import run


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train with the composed config; return the final loss for Hydra sweepers."""
    return run(cfg, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
