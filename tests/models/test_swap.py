"""swap_op runs a model's op through another function, same parameters and state_dict keys."""

import copy

import pytest
import torch

from models.cnn import CurveCNN
from models.mlp import MLP
from models.ops.choice import OPS
from models.poly3 import Poly3
from models.swap import ConvBNCall, LinearCall, Poly3Call, ReLUCall, swap_op


def _swapped_like_custom(model, ops):
    """`model` (built-in) with each of `ops` swapped to our custom function."""
    for op in ops:
        model = swap_op(model, op, OPS[op].custom)
    return model


@pytest.mark.parametrize(
    ("build", "ops", "x"),
    [
        (lambda impl: MLP(1, (8, 8), 1, impl=impl), ("activation", "linear"), torch.randn(16, 1)),
        (lambda impl: Poly3(impl=impl), ("legendre_p3",), torch.randn(16)),
        (
            lambda impl: CurveCNN(8, (2, 4), hidden=8, impl=impl),
            ("conv_bn", "activation", "linear"),
            torch.randn(4, 1, 8, 8),
        ),
    ],
    ids=["mlp", "poly3", "cnn"],
)
def test_swapping_every_op_to_custom_is_the_custom_model(build, ops, x):
    torch.manual_seed(0)
    builtin = build("builtin")
    custom = build("custom")
    custom.load_state_dict(builtin.state_dict())
    swapped = _swapped_like_custom(copy.deepcopy(builtin), ops)
    assert list(swapped.state_dict()) == list(builtin.state_dict())
    for mode in ("train", "eval"):
        getattr(custom, mode)()
        getattr(swapped, mode)()
        torch.testing.assert_close(swapped(x), custom(x), rtol=0, atol=0)
    # Running statistics and batch counts moved the same way.
    for (k, a), (_, b) in zip(swapped.state_dict().items(), custom.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def test_swapped_layers_share_the_parameters():
    model = MLP(1, (4,), 1, impl="builtin")
    weight = model[0].weight
    swapped = swap_op(swap_op(model, "linear", torch.nn.functional.linear), "activation", torch.relu)
    assert swapped is model and swapped[0].weight is weight
    assert [type(m) for m in swapped] == [LinearCall, ReLUCall, LinearCall]
    # Swapping again replaces the function, not the parameters.
    again = swap_op(swapped, "linear", OPS["linear"].custom)
    assert again[0].fn is OPS["linear"].custom and again[0].weight is weight


def test_root_layers_are_replaced():
    poly3 = Poly3()
    swapped = swap_op(poly3, "legendre_p3", OPS["legendre_p3"].builtin)
    assert isinstance(swapped, Poly3Call) and swapped.a is poly3.a
    cnn = CurveCNN(8, (2,), hidden=4)
    assert isinstance(swap_op(cnn.features[0], "conv_bn", OPS["conv_bn"].builtin), ConvBNCall)


def test_unknown_op():
    with pytest.raises(ValueError, match=r"swap_op: unknown op 'gelu'; choose one of \['activation', 'conv_bn', 'legendre_p3', 'linear'\]"):
        swap_op(MLP(), "gelu", torch.relu)
