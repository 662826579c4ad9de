"""saved_tensor_bytes counts each saved storage once; what the elementwise ops save."""

import torch
import torch.nn.functional as F

from models.ops import legendre_p3, linear, relu, relu_masked, saved_tensor_bytes


def test_counts_each_storage_once_and_nothing_without_grad():
    x = torch.randn(100, requires_grad=True)
    with saved_tensor_bytes() as saved:
        y = x * x  # saves x twice: one storage
    assert (saved.bytes, saved.tensors) == (400, 2)
    with torch.no_grad(), saved_tensor_bytes() as saved:
        x * x
    assert saved.bytes == 0
    del y


def test_legendre_p3_saves_only_its_input():
    x = torch.randn(256, requires_grad=True)
    with saved_tensor_bytes() as saved:
        legendre_p3(x)
    assert saved.bytes == x.nbytes


def test_relu_adds_nothing_after_a_linear_and_relu_masked_adds_a_byte_an_element():
    x, w = torch.randn(64, 32), torch.randn(32, 32, requires_grad=True)
    counts = {}
    for name, act in (("torch", torch.relu), ("relu", relu), ("masked", relu_masked)):
        with saved_tensor_bytes() as saved:
            linear(act(linear(x, w)), w)  # the second linear saves the activation
        counts[name] = saved.bytes
    assert counts["relu"] == counts["torch"]
    assert counts["masked"] == counts["torch"] + 64 * 32
    with saved_tensor_bytes() as alone:
        relu_masked(torch.randn(1000, requires_grad=True))
    with saved_tensor_bytes() as twin:
        F.relu(torch.randn(1000, requires_grad=True))
    assert 4 * alone.bytes == twin.bytes
