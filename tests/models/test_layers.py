"""Linear and ReLU modules follow nn.Linear / nn.ReLU conventions for both impls."""

import pytest
import torch
from torch import nn

from models.layers import Linear, ReLU


@pytest.mark.parametrize("bias", [True, False])
def test_linear_init_and_state_dict_match_nn_linear(bias):
    torch.manual_seed(3)
    ours = Linear(5, 7, bias=bias)
    torch.manual_seed(3)
    ref = nn.Linear(5, 7, bias=bias)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    for k in ref.state_dict():
        assert torch.equal(ours.state_dict()[k], ref.state_dict()[k])
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    if not bias:
        assert ours.bias is None and "bias" in ours._parameters


def test_linear_state_dict_round_trip_gives_identical_outputs():
    x = torch.randn(3, 4, 5)
    ref = nn.Linear(5, 2)
    ours = Linear(5, 2)
    ours.load_state_dict(ref.state_dict())
    torch.testing.assert_close(ours(x), ref(x))
    back = nn.Linear(5, 2)
    back.load_state_dict(ours.state_dict())
    torch.testing.assert_close(back(x), ref(x))
    twin = Linear(5, 2, impl="builtin")
    twin.load_state_dict(ours.state_dict())
    torch.testing.assert_close(twin(x), ours(x))


def test_reprs():
    assert repr(Linear(3, 4, bias=False)) == (
        "Linear(in_features=3, out_features=4, bias=False, impl='custom')"
    )
    assert repr(ReLU(impl="builtin")) == "ReLU(impl='builtin')"


def test_factory_kwargs_and_device(device):
    m = Linear(3, 4, device=device, dtype=torch.float64)
    assert m.weight.dtype == torch.float64 and m.weight.device.type == device.type
    y = ReLU()(m(torch.randn(2, 3, dtype=torch.float64, device=device)))
    assert (y >= 0).all()


@pytest.mark.parametrize("impl", ["custom", "builtin"])
def test_mlp_of_layers_trains_like_nn(impl):
    torch.manual_seed(0)
    ours = nn.Sequential(Linear(1, 16, impl=impl), ReLU(impl=impl), Linear(16, 1, impl=impl))
    ref = nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Linear(16, 1))
    ref.load_state_dict(ours.state_dict())
    x = torch.linspace(-3, 3, 50).unsqueeze(1)
    for model in (ours, ref):
        ((model(x) - torch.sin(x)) ** 2).mean().backward()
    for (n, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=n)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, torch.float8_e4m3fn])
def test_linear_rejects_non_float_dtype(dtype):
    with pytest.raises(
        TypeError, match=f"^Linear: dtype must be a floating-point dtype .* {dtype}"
    ):
        Linear(3, 4, dtype=dtype)
