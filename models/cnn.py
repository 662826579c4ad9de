"""A small CNN of FusedConvBN2d blocks that regresses a vector from a 1-channel image."""

from collections.abc import Sequence

import torch
from torch import nn

from .layers import Activation, FusedConvBN2d, Linear, Op
from .ops import fused_conv_bn2d, relu
from .ops import linear as _linear


class CurveCNN(nn.Module):
    """[conv_bn 3x3 → activation → 2x2 max-pool] per entry of `channels`, then a
    Linear → activation → Linear head; max-pool and flatten are plain torch."""

    def __init__(self, image_size: int = 32, channels: Sequence[int] = (8, 16), hidden: int = 64,
                 out_features: int = 4, *, conv_bn: Op = fused_conv_bn2d, activation: Op = relu,
                 linear: Op = _linear, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if not channels or image_size % 2 ** len(channels):
            raise ValueError(f"CurveCNN: image_size={image_size} must be divisible by "
                             f"2**len(channels) = {2 ** len(channels)} (and channels non-empty)")
        factory = {"device": device, "dtype": dtype}
        blocks: list[nn.Module] = []
        in_ch = 1
        for out_ch in channels:
            blocks += [FusedConvBN2d(in_ch, out_ch, 3, padding=1, op=conv_bn, **factory),
                       Activation(op=activation), nn.MaxPool2d(2)]
            in_ch = out_ch
        self.features = nn.Sequential(*blocks)
        side = image_size // 2 ** len(channels)
        self.head = nn.Sequential(
            nn.Flatten(), Linear(in_ch * side * side, hidden, op=linear, **factory),
            Activation(op=activation), Linear(hidden, out_features, op=linear, **factory))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(n, 1, size, size) images → (n, out_features)."""
        return self.head(self.features(images))
