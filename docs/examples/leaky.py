"""A leaky ReLU with its slope as an argument, written with torch ops only.

Autograd differentiates it, so it gets double backward, forward AD and vmap for free. Its
report card, the slope given in the spec, against torch's own:

    PYTHONPATH=docs/examples python -m fitting.opcheck activation \
        "leaky:leaky_relu(negative_slope=0.1)" \
        --ref "torch.nn.functional:leaky_relu(negative_slope=0.1)"
"""

import torch


def leaky_relu(x, negative_slope=0.01):
    """x where x > 0, negative_slope * x elsewhere (a NaN stays NaN)."""
    return torch.where(x > 0, x, negative_slope * x)
