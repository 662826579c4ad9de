"""The layers are drop-ins: Linear for nn.Linear, Activation for nn.Activation, FusedConvBN2d for
nn.Sequential(nn.Conv2d(bias=False), nn.BatchNorm2d): same parameters, init, state_dict,
outputs, gradients and (in training) running statistics."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.layers import Activation, FusedConvBN2d, Linear
from models.ops import conv_bn_reference, fused_conv_bn2d, linear, relu
from tests.ops.helpers import DEVICES


def _outputs_and_grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    out = model(x)
    out.square().sum().backward()
    return [out.detach(), *(p.grad for p in model.parameters())]


@pytest.mark.parametrize("device", DEVICES)
def test_linear_inits_like_nn_linear_and_shares_its_state_dict(device):
    torch.manual_seed(0)
    ours = Linear(5, 3, device=device, dtype=torch.float64)
    torch.manual_seed(0)
    theirs = nn.Linear(5, 3, device=device, dtype=torch.float64)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for key, value in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    x = torch.randn(4, 5, dtype=torch.float64, device=device)
    for got, want in zip(_outputs_and_grads(ours, x), _outputs_and_grads(theirs, x),
                         strict=True):
        torch.testing.assert_close(got, want)
    assert Linear(5, 3, bias=False).bias is None


def test_the_layers_run_the_op_they_are_given():
    calls = []

    def spy(*args):
        calls.append(len(args))
        return F.linear(*args) if len(args) == 3 else torch.tanh(*args)

    assert Linear(2, 2, op=spy)(torch.ones(1, 2)).shape == (1, 2)
    assert torch.equal(Activation(op=spy)(torch.zeros(3)), torch.zeros(3))
    assert calls == [3, 1]
    assert torch.equal(Activation()(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))
    assert "op=linear" in repr(Linear(2, 2)) and repr(Activation()) == "Activation(op=relu)"
    assert Linear(2, 2).op is linear and Activation().op is relu


def _pair(**kw) -> nn.Sequential:
    bn_kw = {k: kw.pop(k) for k in ("momentum", "track_running_stats", "affine") if k in kw}
    return nn.Sequential(nn.Conv2d(3, 4, 3, bias=False, **kw), nn.BatchNorm2d(4, **bn_kw))


LAYER_OPTIONS = [{"padding": 1}, {"stride": 2, "padding": "valid"}, {"momentum": None},
                 {"track_running_stats": False}, {"affine": False}]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", LAYER_OPTIONS, ids=str)
def test_fused_conv_bn_trains_and_evaluates_like_the_module_pair(options, device):
    torch.manual_seed(0)
    fused = FusedConvBN2d(3, 4, 3, **options, device=device, dtype=torch.float64)
    pair = _pair(**options).to(device, torch.float64)
    pair.load_state_dict(fused.state_dict())
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, device=device)
    for mode in (True, True, False):  # two training steps (the stats move), then eval
        fused.train(mode), pair.train(mode)
        for got, want in zip(_outputs_and_grads(fused, x), _outputs_and_grads(pair, x),
                             strict=True):
            torch.testing.assert_close(got, want)
    for key, value in pair.state_dict().items():
        torch.testing.assert_close(fused.state_dict()[key], value, msg=key)


def test_fused_conv_bn_runs_its_op_and_loads_the_pairs_checkpoint():
    layer = FusedConvBN2d(3, 4, 3, op=conv_bn_reference)
    assert list(layer.state_dict()) == list(_pair().state_dict())
    assert layer.op is conv_bn_reference and FusedConvBN2d(1, 1, 1).op is fused_conv_bn2d
    assert "op=conv_bn_reference" in repr(layer)
    layer.load_state_dict(_pair().state_dict())
    assert layer(torch.randn(2, 3, 5, 5)).shape == (2, 4, 3, 3)
    assert layer[1].num_batches_tracked == 1
