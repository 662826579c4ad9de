"""A leaky ReLU with its slope as an argument, written with torch ops only.

Autograd differentiates it, so it gets double backward and forward AD for free. Its card,
the slope given in Hydra's form (the same text train.py takes), against torch's own:

    PYTHONPATH=docs/examples python -m fitting.opcheck activation \
        '{_target_:leaky.leaky_relu,_partial_:true,negative_slope:0.1}' \
        --ref '{_target_:torch.nn.functional.leaky_relu,_partial_:true,negative_slope:0.1}'
"""

import torch


def leaky_relu(x, negative_slope=0.01):
    """x where x > 0, negative_slope * x elsewhere (a NaN stays NaN)."""
    return torch.where(x > 0, x, negative_slope * x)
