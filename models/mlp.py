"""A multilayer perceptron of the op library's Linear and ReLU layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .layers import Linear, ReLU


class MLP(nn.Sequential):
    """Linear → ReLU → … → Linear; every layer gets `impl`."""

    def __init__(
        self,
        in_features: int = 1,
        hidden: Sequence[int] = (64, 64),
        out_features: int = 1,
        impl: str = "custom",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        sizes = [in_features, *hidden, out_features]
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers.append(Linear(n_in, n_out, impl=impl, device=device, dtype=dtype))
            if i < len(sizes) - 2:
                layers.append(ReLU(impl=impl))
        super().__init__(*layers)
