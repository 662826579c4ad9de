"""A small CNN of FusedConvBN2d blocks that regresses a vector from a 1-channel image."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .layers import FusedConvBN2d, Impl, Linear, ReLU


class CurveCNN(nn.Module):
    """[FusedConvBN2d 3x3 → activation → 2x2 max-pool] per entry of `channels`, then an MLP
    head. `impl` runs every op unless `conv_bn`, `activation` or `linear` names that op's own;
    max-pooling and flattening are plain torch."""

    def __init__(
        self,
        image_size: int = 32,
        channels: Sequence[int] = (8, 16),
        hidden: int = 64,
        out_features: int = 4,
        impl: Impl = "custom",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        conv_bn: Impl | None = None,
        activation: Impl | None = None,
        linear: Impl | None = None,
    ) -> None:
        super().__init__()
        conv_bn, activation, linear = (impl if op is None else op
                                       for op in (conv_bn, activation, linear))
        if len(channels) < 1 or image_size % 2 ** len(channels):
            raise ValueError(
                f"CurveCNN: image_size={image_size} must be divisible by 2**len(channels)"
                f" = {2 ** len(channels)} (and channels non-empty)"
            )
        factory = {"device": device, "dtype": dtype}
        blocks: list[nn.Module] = []
        in_ch = 1
        for out_ch in channels:
            blocks += [
                FusedConvBN2d(in_ch, out_ch, 3, padding=1, impl=conv_bn, **factory),
                ReLU(impl=activation),
                nn.MaxPool2d(2),
            ]
            in_ch = out_ch
        self.features = nn.Sequential(*blocks)
        side = image_size // 2 ** len(channels)
        self.head = nn.Sequential(
            nn.Flatten(),
            Linear(in_ch * side * side, hidden, impl=linear, **factory),
            ReLU(impl=activation),
            Linear(hidden, out_features, impl=linear, **factory),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(n, 1, size, size) images → (n, out_features)."""
        return self.head(self.features(images))
