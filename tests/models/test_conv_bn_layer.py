"""FusedConvBN2d against nn.Sequential(nn.Conv2d(bias=False), nn.BatchNorm2d): training steps,
running stats, eval, state_dict round trips, fuse_conv_bn / unfuse_conv_bn, errors."""

import copy
import re

import pytest
import torch
from torch import nn

from models.layers import FusedConvBN2d, fuse_conv_bn, unfuse_conv_bn
from models.ops import saved_tensor_bytes

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# FusedConvBN2d / nn.Conv2d keyword arguments
CONVS = {
    "plain": {"in_channels": 3, "out_channels": 4, "kernel_size": 3},
    "stride-pad": {
        "in_channels": 3,
        "out_channels": 4,
        "kernel_size": 3,
        "stride": 2,
        "padding": 1,
    },
    "dilation": {
        "in_channels": 3,
        "out_channels": 4,
        "kernel_size": 3,
        "padding": 2,
        "dilation": 2,
    },
    "groups": {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "padding": 1, "groups": 2},
    "depthwise": {
        "in_channels": 4,
        "out_channels": 4,
        "kernel_size": 3,
        "padding": "same",
        "groups": 4,
    },
}
BN_KEYS = ("eps", "momentum", "affine", "track_running_stats")


def pair_like(fused: FusedConvBN2d, **kw) -> nn.Sequential:
    """The built-in nn.Sequential(Conv2d, BatchNorm2d) with fused's config, state and dtype."""
    conv, bn = fused.conv, fused.bn
    ref = nn.Sequential(
        nn.Conv2d(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            bias=False,
        ),
        nn.BatchNorm2d(bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats),
    ).to(conv.weight.dtype)
    ref.load_state_dict(fused.state_dict())
    return ref


def randomize_(module: nn.Module) -> nn.Module:
    """Non-trivial BN parameters and running stats, so parity checks see them."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if t.is_floating_point() and "1." in name:
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
    return module


def step(module: nn.Module, x: torch.Tensor, grad_out: torch.Tensor | None = None):
    """Output, x's grad and the parameter grads of one forward+backward."""
    x = x.detach().clone().requires_grad_()
    module.zero_grad(set_to_none=True)
    out = module(x)
    out.backward(torch.ones_like(out) if grad_out is None else grad_out)
    return [out.detach(), x.grad, *(p.grad for p in module.parameters())]


def assert_same(custom, builtin, dtype):
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-4}
    assert len(custom) == len(builtin)
    for c, b in zip(custom, builtin, strict=True):
        torch.testing.assert_close(c, b, **tol)


@pytest.mark.parametrize("impl", ["custom", "builtin"])
@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum0.1", "cumulative"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "noaffine"])
@pytest.mark.parametrize("track", [True, False], ids=["stats", "nostats"])
@pytest.mark.parametrize("conv", CONVS.values(), ids=CONVS.keys())
def test_training_steps_then_eval_match_builtin_pair(conv, track, affine, momentum, impl):
    dtype = torch.float64
    torch.manual_seed(0)
    fused = FusedConvBN2d(
        **conv, momentum=momentum, affine=affine, track_running_stats=track, impl=impl
    ).to(dtype)
    randomize_(fused)
    ref = pair_like(fused)
    for _ in range(3):
        x = torch.randn(3, conv["in_channels"], 7, 7, dtype=dtype)
        with torch.no_grad():
            grad_out = torch.randn_like(ref[0](x))
        assert_same(step(fused, x, grad_out), step(ref, x, grad_out), dtype)
        assert_same(list(fused.state_dict().values()), list(ref.state_dict().values()), dtype)
    if track:
        assert int(fused.bn.num_batches_tracked) == 3
    fused.eval()
    ref.eval()
    x = torch.randn(2, conv["in_channels"], 6, 6, dtype=dtype)
    assert_same(step(fused, x), step(ref, x), dtype)
    assert_same(list(fused.state_dict().values()), list(ref.state_dict().values()), dtype)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_float32_matches_builtin_pair(mode, device):
    torch.manual_seed(0)
    fused = randomize_(FusedConvBN2d(8, 16, 3, padding=1)).to(device)
    ref = pair_like(fused).to(device)
    fused.train(mode == "train")
    ref.train(mode == "train")
    x = torch.randn(4, 8, 12, 12, device=device)
    assert_same(step(fused, x), step(ref, x), torch.float32)
    assert_same(list(fused.state_dict().values()), list(ref.state_dict().values()), torch.float32)


def test_frozen_batch_norm_in_training_model():
    """bn.eval() inside a training model: running stats used and left alone, as in nn.BatchNorm."""
    fused = randomize_(FusedConvBN2d(3, 4, 3).double())
    ref = pair_like(fused)
    fused.bn.eval()
    ref[1].eval()
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    assert_same(step(fused, x), step(ref, x), torch.float64)
    assert_same(list(fused.state_dict().values()), list(ref.state_dict().values()), torch.float64)
    assert int(fused.bn.num_batches_tracked) == 0


def test_state_dict_keys_are_the_sequential_pairs():
    fused = FusedConvBN2d(3, 4, 3)
    plain = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4))
    assert list(fused.state_dict()) == list(plain.state_dict())
    assert [n for n, _ in fused.named_parameters()] == [n for n, _ in plain.named_parameters()]
    assert fused.conv is fused.get_submodule("0") and fused.bn is fused.get_submodule("1")


def trained(impl: str) -> FusedConvBN2d:
    torch.manual_seed(0)
    fused = FusedConvBN2d(4, 6, 3, padding=1, groups=2, impl=impl).double()
    opt = torch.optim.SGD(fused.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        fused(torch.randn(4, 4, 8, 8, dtype=torch.float64)).square().mean().backward()
        opt.step()
    return fused


@pytest.mark.parametrize("trained_with", ["custom", "builtin"])
def test_checkpoint_round_trips(trained_with, tmp_path):
    """custom ↔ builtin ↔ plain Sequential (via unfuse_conv_bn and a fresh one): same outputs."""
    source = trained(trained_with)
    torch.save(source.state_dict(), tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt")
    other = FusedConvBN2d(
        4, 6, 3, padding=1, groups=2, impl="builtin" if trained_with == "custom" else "custom"
    ).double()
    other.load_state_dict(state)
    fresh_plain = nn.Sequential(
        nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False), nn.BatchNorm2d(6)
    ).double()
    fresh_plain.load_state_dict(state)
    unfused = unfuse_conv_bn(copy.deepcopy(source))
    assert type(unfused) is nn.Sequential
    back = FusedConvBN2d(4, 6, 3, padding=1, groups=2).double()
    back.load_state_dict(fresh_plain.state_dict())
    x = torch.randn(3, 4, 8, 8, dtype=torch.float64)
    models = [source, other, fresh_plain, unfused, back]
    for training in (False, True):
        outs = []
        for m in models:
            m.train(training)
            outs.append(m(x))
        for out in outs[1:]:
            torch.testing.assert_close(out, outs[0], rtol=1e-12, atol=1e-12)
    states = [m.state_dict() for m in models]
    for s in states[1:]:
        assert list(s) == list(states[0])
        for k in s:
            torch.testing.assert_close(s[k], states[0][k], rtol=1e-12, atol=1e-12)


def plain_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)),
        nn.ReLU(),
        nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
        ),
        nn.Conv2d(8, 8, 3, bias=True),  # has a bias: not fused
        nn.BatchNorm2d(8),
        nn.Conv2d(8, 4, 1, bias=False),  # followed by no BatchNorm2d: not fused
        nn.AdaptiveAvgPool2d(1),
    ).double()


@pytest.mark.parametrize("impl", ["custom", "builtin"])
def test_fuse_conv_bn_replaces_pairs_keeping_weights(impl):
    plain = randomize_(plain_model())
    reference = copy.deepcopy(plain)
    params = {id(p) for p in plain.parameters()}
    fused = fuse_conv_bn(plain, impl=impl)
    assert {id(p) for p in fused.parameters()} == params  # shared, not copied
    assert isinstance(fused[0], FusedConvBN2d)
    assert isinstance(fused[2][0], FusedConvBN2d) and isinstance(fused[2][3], FusedConvBN2d)
    assert type(fused[3]) is nn.Conv2d and type(fused[4]) is nn.BatchNorm2d
    assert sum(isinstance(m, FusedConvBN2d) for m in fused.modules()) == 3
    assert all(m.impl == impl for m in fused.modules() if isinstance(m, FusedConvBN2d))
    # A pair Sequential keeps its keys; pairs inside a longer Sequential move under the fused one.
    fused_keys = set(fused.state_dict())
    assert {k for k in reference.state_dict() if k.startswith("0.")} <= fused_keys
    assert "2.0.0.weight" in fused_keys and "2.1.running_mean" not in fused_keys
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    assert_same(step(fused, x), step(reference, x), torch.float64)
    fused.eval()
    reference.eval()
    assert_same(step(fused, x), step(reference, x), torch.float64)

    restored = unfuse_conv_bn(fused)
    assert not any(isinstance(m, FusedConvBN2d) for m in restored.modules())
    assert list(restored.state_dict()) == list(reference.state_dict())
    assert repr(restored) == repr(reference)
    assert_same(step(restored, x), step(reference, x), torch.float64)


def test_fuse_a_bare_pair_returns_the_fused_module():
    pair = nn.Sequential(nn.Conv2d(2, 3, 3, bias=False), nn.BatchNorm2d(3))
    fused = fuse_conv_bn(pair)
    assert isinstance(fused, FusedConvBN2d)
    assert fused.conv is pair[0] and fused.bn is pair[1]
    assert list(fused.state_dict()) == list(pair.state_dict())


def test_cnn_keeps_no_conv_outputs_for_backward():
    """Saved-for-backward bytes of a conv-BN-ReLU stack: the fused one keeps no conv outputs."""
    x = torch.randn(4, 3, 16, 16)
    custom = fuse_conv_bn(plain_model().float())
    builtin = fuse_conv_bn(plain_model().float(), impl="builtin")
    with saved_tensor_bytes() as c:
        custom(x)
    with saved_tensor_bytes() as b:
        builtin(x)
    assert c.bytes < 0.75 * b.bytes


def test_double_backward_through_the_module():
    fused = FusedConvBN2d(2, 3, 3).double()
    ref = pair_like(fused)
    x = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    results = []
    for m in (fused, ref):
        xi = x.clone().requires_grad_()
        (g,) = torch.autograd.grad(m(xi).pow(3).sum(), xi, create_graph=True)
        (gg,) = torch.autograd.grad(g.square().sum(), xi)
        results.append(gg)
    torch.testing.assert_close(results[0], results[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("impl", ["custom", "builtin"])
def test_training_on_an_empty_batch_matches_the_pair(impl):
    """Like nn.BatchNorm2d: an empty output, running stats kept, the batch counted."""
    fused = FusedConvBN2d(3, 4, 3, padding=1, impl=impl).train()
    ref = pair_like(fused)
    x = torch.randn(0, 3, 5, 5)
    out, want = fused(x), ref(x)
    assert out.shape == want.shape == (0, 4, 5, 5)
    for a, b in zip(fused.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert int(fused.bn.num_batches_tracked) == 1
    assert torch.equal(fused.bn.running_mean, torch.zeros(4))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"groups": 3}, ValueError, "FusedConvBN2d: in_channels=4 is not divisible by groups=3"),
        (
            {"out_channels": 5, "groups": 2},
            ValueError,
            "FusedConvBN2d: out_channels=5 is not divisible by groups=2",
        ),
        ({"in_channels": 0}, ValueError, "FusedConvBN2d: in_channels must be a positive int"),
        ({"impl": "fast"}, ValueError, "FusedConvBN2d: impl must be one of ('custom', 'builtin')"),
        (
            {"kernel_size": 0},
            ValueError,
            "FusedConvBN2d: kernel_size must be an int ≥ 1 or a pair of them, got 0",
        ),
        (
            {"dtype": torch.int64},
            TypeError,
            "FusedConvBN2d: dtype must be a floating-point dtype (float16, bfloat16, float32, "
            "float64) or None for the default, got torch.int64",
        ),
    ],
)
def test_constructor_errors(kwargs, error, message):
    args = {"in_channels": 4, "out_channels": 6, "kernel_size": 3, **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        FusedConvBN2d(**args)


@pytest.mark.parametrize("impl", ["custom", "builtin"])
@pytest.mark.parametrize(
    ("shape", "training", "message"),
    [
        ((4, 8, 8), True, "expected 4-D input (N, C, H, W), got 3-D input"),
        ((2, 3, 8, 8), True, "channel mismatch: input has 3 channels"),
        ((1, 4, 3, 3), True, "expected more than 1 value per channel when training"),
    ],
)
def test_forward_errors(impl, shape, training, message):
    fused = FusedConvBN2d(4, 6, 3, impl=impl).train(training)
    with pytest.raises(ValueError, match="fused_conv_bn2d: " + re.escape(message)):
        fused(torch.randn(shape))
    assert int(fused.bn.num_batches_tracked) == 0  # a rejected batch is not counted


def test_from_modules_rejects_non_pairs():
    with pytest.raises(ValueError, match="FusedConvBN2d: from_modules needs an nn.Conv2d"):
        FusedConvBN2d.from_modules(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3))
    with pytest.raises(ValueError, match="got Conv2d and BatchNorm1d"):
        FusedConvBN2d.from_modules(nn.Conv2d(2, 3, 3, bias=False), nn.BatchNorm1d(3))


def test_repr_names_impl_and_children():
    text = repr(FusedConvBN2d(2, 3, 3, impl="builtin"))
    assert "impl='builtin'" in text and "(0): Conv2d" in text and "(1): BatchNorm2d" in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_cuda_peak_memory_of_a_cnn_is_at_most_0_6x():
    def peak(impl):
        torch.manual_seed(0)
        layers = []
        for i in range(4):
            layers += [FusedConvBN2d(16 if i == 0 else 32, 32, 3, padding=1, impl=impl), nn.ReLU()]
        model = nn.Sequential(*layers).cuda()
        x = torch.randn(64, 16, 32, 32, device="cuda", requires_grad=True)
        model(x).sum().backward()  # warm-up: grads and cuDNN workspaces allocated
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        model(x).sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    assert peak("custom") <= 0.6 * peak("builtin")
