"""A layer norm with no slot in the app, carded against F.layer_norm on sample inputs.

    PYTHONPATH=docs/examples python -m fitting.opcheck any layer_norm:layer_norm \
        --ref torch.nn.functional:layer_norm --inputs layer_norm:samples
"""

import torch


def layer_norm(x, normalized_shape, weight, bias, eps=1e-5):
    """Normalize the last dimension to mean 0 and variance 1, then scale and shift; the
    arguments are F.layer_norm's (normalized_shape is the last dimension's size)."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def samples():
    """The inputs to card it on, as (args, kwargs) pairs: a batch of 16 vectors of 8, and the
    same with eps=1e-3. The tensors that require grad are the ones that train."""
    g = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(*shape, generator=g).requires_grad_()
                       for shape in ((16, 8), (8,), (8,)))
    return [((x, (8,), weight, bias), {}), ((x, (8,), weight, bias), {"eps": 1e-3})]
