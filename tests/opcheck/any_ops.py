"""Ops with no slot, and their sample inputs, for `python -m fitting.opcheck any`."""

import torch


def layer_norm(x, normalized_shape, weight, bias, eps=1e-5):
    """F.layer_norm over the last dimension, from torch ops."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def layer_norm_samples():
    """One (args, kwargs) pair: a (16, 8) input, its weight and bias."""
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g) for s in ((16, 8), (8,), (8,)))
    return [((x, (8,), w, b), {})]


def mse(input, target):
    """Mean squared error, from torch ops."""
    return ((input - target) ** 2).mean()


def mse_samples():
    """A prediction and its target."""
    g = torch.Generator().manual_seed(1)
    return [((torch.randn(32, 4, generator=g), torch.randn(32, 4, generator=g)), {})]


def softmax(x, dim):
    """Softmax along `dim`."""
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def softmax_last_dim(x, dim):
    """A softmax that ignores `dim` and always normalizes the last dimension."""
    return softmax(x, -1)


def softmax_samples():
    """The same input, normalized along each of its dimensions."""
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(2))
    return [((x,), {"dim": 1}), ((x,), {"dim": 0})]


def leaky_relu(x, slope):
    """max(x, slope·x), the slope given by the spec, e.g. leaky_relu(slope=0.1)."""
    return torch.where(x > 0, x, slope * x)
