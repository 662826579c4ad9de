"""A multilayer perceptron whose linear maps and activations run the given ops."""

from collections.abc import Sequence

import torch
from torch import nn

from .layers import Activation, Linear, Op
from .ops import linear as _linear
from .ops import relu


class MLP(nn.Sequential):
    """Linear → activation → … → Linear, each Linear running `linear`, each activation
    `activation` (the op slots, named as a task's `ops` names them)."""

    def __init__(self, in_features: int = 1, hidden: Sequence[int] = (64, 64),
                 out_features: int = 1, *, linear: Op = _linear, activation: Op = relu,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None
                 ) -> None:
        sizes = [in_features, *hidden, out_features]
        layers: list[nn.Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [Linear(n_in, n_out, op=linear, device=device, dtype=dtype),
                       Activation(op=activation)]
        super().__init__(*layers[:-1])
