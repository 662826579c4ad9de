"""Entry point: `python train.py [overrides]`; see `python train.py --help`."""

import gc
import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import fitting.config  # noqa: F401  (registers the config schemas before Hydra composes)

log = logging.getLogger(__name__)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train with the composed config; return the final loss for Hydra sweepers."""
    # Imported here so --help, --cfg and config errors answer without importing torch.
    from fitting.run import run

    hydra_cfg = HydraConfig.get()
    loss = run(cfg, hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        sweep_dir = Path(hydra_cfg.sweep.dir).resolve()
        log.info("all jobs of the sweep: tensorboard --logdir %s", sweep_dir)
    # The interpreter's collection at exit walks every object torch and torch._dynamo
    # created on import (~0.6 s here); frozen objects are skipped. Nothing left needs it:
    # the event file and logs are already closed or flushed.
    gc.freeze()
    return loss


if __name__ == "__main__":
    main()
