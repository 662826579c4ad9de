"""A straight-through estimator: round forward, the identity backward, as the LSQ and PACT
quantizers train. Finite differences of a rounding are 0, so gradcheck fails, and fails for
the estimator's usual torch idiom too: the card calls that "same as the reference".

    PYTHONPATH=docs/examples python -m fitting.opcheck any ste:RoundSTE \
        --ref ste:round_ste_reference --shape 4,8
"""

import torch


class RoundSTE(torch.autograd.Function):
    """x.round() forward; the incoming gradient passes straight through."""

    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad


def round_ste_reference(x):
    """The same estimator in the usual torch idiom."""
    return x + (x.round() - x).detach()
