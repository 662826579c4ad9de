"""task=cnn: a CNN of FusedConvBN2d blocks regressing (a, b, c, d) from images of noisy curves
a + b·P3(c + d·x) (fitting.tasks.cnn)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fitting.checks import Checker
from fitting.tasks.option import TaskOption

if TYPE_CHECKING:
    import torch

    from fitting.tasks.cnn import CNNTask


@dataclass
class CNNConfig:
    name: str = "cnn"
    n_train: int = 8192
    n_val: int = 512
    batch_size: int = 64
    image_size: int = 32
    noise: float = 0.1  # std of pixel noise
    channels: list[int] = field(default_factory=lambda: [8, 16])


def check(cfg: Any, c: Checker) -> None:
    """Batches of >= 2 images (batch norm), noise >= 0, blocks that halve the image evenly."""
    c.at_least("n_train", cfg.n_train, 2)
    c.at_least("n_val", cfg.n_val, 1)
    if not 2 <= cfg.batch_size <= max(cfg.n_train, 2):
        c.problem(
            f"{c.key('batch_size')} must be in [2, {c.key('n_train')}={cfg.n_train}] (batch norm "
            f"needs 2 images), got {cfg.batch_size}"
        )
    c.at_least("noise", cfg.noise, 0.0, "(the std of the pixel noise)")
    channels = list(cfg.channels)
    if not channels or any(ch < 1 for ch in channels):
        c.problem(f"{c.key('channels')} must be a non-empty list of sizes >= 1, got {channels}")
    elif cfg.image_size < 1 or cfg.image_size % 2 ** len(channels):
        c.problem(
            f"{c.key('image_size')} must be a positive multiple of 2**len({c.key('channels')}) = "
            f"{2 ** len(channels)} (one 2x2 pooling per block), got {cfg.image_size}"
        )


def build(
    cfg: Any, ops: dict, device: torch.device, dtype: torch.dtype, generator: torch.Generator
) -> CNNTask:
    """The cnn task: images, validation split and minibatch order drawn from `generator`."""
    from fitting.tasks.cnn import CNNTask

    return CNNTask(cfg, ops, device, dtype, generator)


OPTION = TaskOption("cnn", CNNConfig, check, build, slots=("conv_bn", "activation", "linear"))
