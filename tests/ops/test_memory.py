"""saved_tensor_bytes counts what autograd keeps for backward, each storage once."""

import torch
import torch.nn.functional as F

from models.ops import legendre_p3, linear, relu, relu_masked, saved_tensor_bytes


def test_counts_each_storage_once():
    x = torch.randn(100, requires_grad=True)
    with saved_tensor_bytes() as saved:
        y = x * x  # saves x twice (self and other): one storage
    assert saved.bytes == 400 and saved.tensors == 2
    with saved_tensor_bytes() as saved:
        y = torch.sin(x) * torch.cos(x)
    # sin and cos save x (400 bytes); the product saves both results (400 + 400).
    assert saved.bytes == 1200
    del y


def test_nothing_saved_without_grad():
    x = torch.randn(100)
    with saved_tensor_bytes() as saved:
        F.relu(x)
    assert saved.bytes == 0 and saved.tensors == 0


def test_relu_masked_saves_a_quarter_of_builtin(device):
    x = torch.randn(1024, 64, device=device, requires_grad=True)
    with saved_tensor_bytes() as custom:
        relu_masked(x)
    with saved_tensor_bytes() as builtin:
        F.relu(x)
    assert builtin.bytes == x.numel() * 4
    assert custom.bytes == x.numel()  # one byte per element
    assert custom.bytes <= 0.25 * builtin.bytes


def test_linear_saves_only_what_requested_grads_need():
    x = torch.randn(32, 16)
    w = torch.randn(8, 16, requires_grad=True)
    with saved_tensor_bytes() as custom:
        linear(x, w)  # only grad_W is needed, and it needs only x
    with saved_tensor_bytes() as builtin:
        F.linear(x, w)
    assert custom.bytes == x.numel() * 4
    assert builtin.bytes >= custom.bytes


def test_legendre_saves_only_its_input():
    x = torch.randn(2000, requires_grad=True)
    with saved_tensor_bytes() as custom:
        legendre_p3(x)
    assert custom.bytes == 2000 * 4 and custom.tensors == 1


def test_eager_legendre_expression_saves_exactly_its_input_too():
    """Why legendre_p3 cannot save fewer bytes than the tutorial's eager expression: that graph
    already saves one tensor, the input (for pow's backward); its multiplications by Python
    scalars save nothing. The input is also the least P3'(x) = 7.5x² - 1.5 can be computed from
    without losing precision."""
    x = torch.randn(2000, requires_grad=True)
    with saved_tensor_bytes() as eager:
        0.5 * (5 * x**3 - 3 * x)
    with saved_tensor_bytes() as custom:
        legendre_p3(x)
    assert eager.tensors == custom.tensors == 1
    assert eager.bytes == custom.bytes == x.nbytes


def test_relu_saves_its_output_which_the_next_linear_shares(device):
    """relu saves as much as F.relu alone, but inside Linear → ReLU → Linear it adds nothing:
    the next Linear saves the same output tensor, and a storage counts once. relu_masked's
    1-byte mask comes on top of that shared output."""
    x = torch.randn(256, 64, device=device, requires_grad=True)
    w = torch.randn(32, 64, device=device, requires_grad=True)
    with saved_tensor_bytes() as alone:
        relu(x)
    assert alone.bytes == x.nbytes
    totals = {}
    for name, fn in (("relu", relu), ("relu_masked", relu_masked), ("builtin", F.relu)):
        with saved_tensor_bytes() as saved:
            F.linear(fn(x), w)
        totals[name] = saved.bytes
    assert totals["relu"] == totals["builtin"] == x.nbytes + w.nbytes
    assert totals["relu_masked"] == totals["builtin"] + x.numel()
