"""fuse_conv_bn turns a model's Conv2d→BatchNorm2d pairs into FusedConvBN2d layers where the
forward feeds the conv's output to the batch norm alone: same parameters and state, the same
training in float64 bit for bit, no conv output saved; every other pair stays."""

import copy

import pytest
import torch
from torch import nn

from models.fuse import fuse_conv_bn
from models.layers import FusedConvBN2d
from models.ops import conv_bn_reference, fused_conv_bn2d, saved_tensor_bytes

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: threads only add sync


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: conv-bn-relu-conv-bn, a downsample conv-bn, the sum."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                            nn.BatchNorm2d(c_out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


def _resnet(dtype=torch.float64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU(), BasicBlock(8, 8), BasicBlock(8, 16, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 2)).to(dtype)


def test_every_pair_of_a_resnet_becomes_one_fused_layer_of_the_same_modules():
    model = _resnet()
    params = [id(p) for p in model.parameters()]
    state = [t.data_ptr() for t in model.state_dict().values()]
    assert fuse_conv_bn(model) is model
    fused = [name for name, m in model.named_modules() if isinstance(m, FusedConvBN2d)]
    assert fused == ["0", "3.conv1", "3.conv2", "4.conv1", "4.conv2", "4.downsample.0"]
    assert all(type(model.get_submodule(n)[1]) is nn.BatchNorm2d for n in fused)
    bns = [n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns == [f"{n}.1" for n in fused]  # no batch norm left outside a fused layer
    assert [id(p) for p in model.parameters()] == params  # an optimizer's references hold
    assert [t.data_ptr() for t in model.state_dict().values()] == state


def test_a_fused_resnet_trains_bit_identical_to_the_original_in_float64():
    original = _resnet()
    fused = fuse_conv_bn(copy.deepcopy(original))
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    runs = []
    for model in (original, fused):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        outs = []
        for _ in range(3):
            optimizer.zero_grad()
            outs.append(model(x))
            outs[-1].square().mean().backward()
            optimizer.step()
        model.eval()
        runs.append([*outs, model(x), *model.state_dict().values()])
    assert len(runs[0]) == len(runs[1])
    for got, want in zip(runs[1], runs[0], strict=True):
        assert torch.equal(got, want)


def test_the_fused_resnet_saves_no_conv_output_for_backward():
    model, x = _resnet(torch.float32), torch.randn(4, 3, 8, 8)
    conv_outputs = []
    hooks = [m.register_forward_hook(lambda m, i, out: conv_outputs.append(out.nbytes))
             for m in model.modules() if isinstance(m, nn.Conv2d)]
    with saved_tensor_bytes() as original:
        model(x)
    for hook in hooks:
        hook.remove()
    with saved_tensor_bytes() as fused:
        fuse_conv_bn(model)(x)
    # The pair's batch norm keeps its running stats for backward too; ours does not.
    stats = sum(t.nbytes for name, t in model.named_buffers() if "running" in name)
    assert len(conv_outputs) == 6
    assert original.bytes - fused.bytes == sum(conv_outputs) + stats


class Unfusable(nn.Module):
    """One fusable pair (ok) next to pairs that must stay."""

    def __init__(self) -> None:
        super().__init__()
        convs = {"biased": {}, "shared": {"bias": False}, "twice": {"bias": False},
                 "reflect": {"bias": False, "padding_mode": "reflect", "padding": 1},
                 "ok": {"bias": False}}
        self.convs = nn.ModuleDict({k: nn.Conv2d(2, 2, 3 if k == "reflect" else 1, **kw)
                                    for k, kw in convs.items()})
        self.bns = nn.ModuleDict({k: nn.BatchNorm2d(2) for k in [*convs, "after_relu"]})

    def forward(self, x):
        c, b = self.convs, self.bns
        shared = c["shared"](x)
        return (b["biased"](c["biased"](x)) + b["shared"](shared) + shared
                + b["twice"](c["twice"](c["twice"](x))) + b["reflect"](c["reflect"](x))
                + b["after_relu"](torch.relu(x)) + b["ok"](c["ok"](x)))


def test_pairs_the_dataflow_does_not_allow_stay_as_they_are():
    model = Unfusable().double()
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    want = model(x)
    fuse_conv_bn(model)
    assert type(model.convs["ok"]) is FusedConvBN2d and type(model.bns["ok"]) is nn.Identity
    assert [k for k, m in model.convs.items() if type(m) is nn.Conv2d] == [
        "biased", "shared", "twice", "reflect"]
    assert len([m for m in model.bns.values() if type(m) is nn.BatchNorm2d]) == 5
    torch.testing.assert_close(model(x), want, rtol=0, atol=0)


class Branchy(nn.Module):
    """A forward torch.fx cannot trace (it branches on a value) around a traceable block."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(1, 2, 1, bias=False), nn.BatchNorm2d(2)
        self.block = nn.Sequential(nn.Conv2d(2, 2, 1, bias=False), nn.BatchNorm2d(2))

    def forward(self, x):
        return self.block(self.bn(self.conv(-x if x.sum() > 0 else x)))


def test_an_untraceable_model_keeps_its_own_pairs_with_a_warning_and_fuses_its_blocks():
    model = Branchy()
    with pytest.warns(UserWarning, match="torch.fx cannot trace Branchy .*its own "
                                         "Conv2d→BatchNorm2d pairs stay as they are") as said:
        fuse_conv_bn(model)
    assert len(said) == 1 and "\n" not in str(said[0].message)  # one line
    assert type(model.conv) is nn.Conv2d and type(model.bn) is nn.BatchNorm2d
    assert type(model.block[0]) is FusedConvBN2d and type(model.block[1]) is nn.Identity
    assert model(torch.randn(2, 1, 3, 3)).shape == (2, 2, 3, 3)


def test_fused_layers_run_the_op_given_and_those_already_there_are_kept():
    assert {m.op for m in fuse_conv_bn(_resnet()).modules()
            if isinstance(m, FusedConvBN2d)} == {fused_conv_bn2d}
    assert {m.op for m in fuse_conv_bn(_resnet(), op=conv_bn_reference).modules()
            if isinstance(m, FusedConvBN2d)} == {conv_bn_reference}
    layer = FusedConvBN2d(1, 2, 3, op=conv_bn_reference)
    ours = FusedConvBN2d(2, 2, 1)  # its op takes no fx proxies: a leaf of the trace
    model = nn.Sequential(layer, ours, nn.Conv2d(2, 2, 1, bias=False), nn.BatchNorm2d(2))
    assert fuse_conv_bn(model)[0] is layer and layer.op is conv_bn_reference
    assert model[1] is ours
    assert type(model[2]) is FusedConvBN2d and type(model[3]) is nn.Identity


@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_a_fused_pair_uses_its_batch_norms_eps(eps):
    torch.manual_seed(0)
    pair = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4, eps=eps)).double()
    fused = fuse_conv_bn(copy.deepcopy(pair))
    built = FusedConvBN2d(3, 4, 3, eps=eps, dtype=torch.float64)
    built.load_state_dict(pair.state_dict())
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64) * 0.01  # a small variance: eps counts
    for model in (fused, built):
        torch.testing.assert_close(model(x), pair(x), rtol=1e-10, atol=1e-12)
