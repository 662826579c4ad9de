"""A multilayer perceptron of the op library's Linear and ReLU layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .layers import Impl, Linear, ReLU


class MLP(nn.Sequential):
    """Linear → activation → … → Linear. `impl` runs every op unless `linear` or `activation`
    names that op's own (custom, builtin or a function)."""

    def __init__(
        self,
        in_features: int = 1,
        hidden: Sequence[int] = (64, 64),
        out_features: int = 1,
        impl: Impl = "custom",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        linear: Impl | None = None,
        activation: Impl | None = None,
    ) -> None:
        linear = impl if linear is None else linear
        activation = impl if activation is None else activation
        sizes = [in_features, *hidden, out_features]
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers.append(Linear(n_in, n_out, impl=linear, device=device, dtype=dtype))
            if i < len(sizes) - 2:
                layers.append(ReLU(impl=activation))
        super().__init__(*layers)
