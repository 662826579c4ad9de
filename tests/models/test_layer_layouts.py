"""The layers on inputs, parameters and incoming gradients in odd layouts equal their module
twins on dense copies: Linear ~ nn.Linear, FusedConvBN2d ~ nn.Conv2d(bias=False) +
nn.BatchNorm2d with every BatchNorm2d option, over training steps then eval: outputs,
gradients, running statistics and num_batches_tracked."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch import nn

from models.layers import FusedConvBN2d, Linear
from tests.ops.layouts import DTYPES, PROPERTY, assert_all_close, layouts, odd

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: threads only add sync


def _steps(model: nn.Module, x: torch.Tensor, grad_outs: list, modes: list[bool]) -> dict:
    """Per call (train/eval by `modes`): the output and the gradients of x and of each
    parameter; then the state_dict (running stats, num_batches_tracked)."""
    results = {}
    for i, (mode, grad_out) in enumerate(zip(modes, grad_outs, strict=True)):
        model.train(mode)
        x = x.detach().requires_grad_()  # a leaf with x's strides
        out = model(x)
        names = ["out", "grad x", *(f"grad {name}" for name, _ in model.named_parameters())]
        grads = torch.autograd.grad(out, [x, *model.parameters()], grad_out,
                                    materialize_grads=True, allow_unused=True)
        results |= {f"call {i} ({'train' if mode else 'eval'}) {name}": value
                    for name, value in zip(names, [out, *grads], strict=True)}
    return results | model.state_dict()


def _both(ours: nn.Module, twin: nn.Module, x, grad_outs, modes, dtype) -> None:
    """ours on x and grad_outs as given, the twin on dense copies: the same results."""
    twin.load_state_dict(ours.state_dict())
    got = _steps(ours, x, grad_outs, modes)
    want = _steps(twin, x.contiguous(), [g.contiguous() for g in grad_outs], modes)
    assert list(got) == list(want)
    assert_all_close(list(got.values()), list(want.values()), list(got), dtype)


def _odd_parameter(module: nn.Module, name: str, kind: str) -> None:
    """module.name becomes a Parameter of the same values in layout `kind`."""
    value = getattr(module, name).detach()
    setattr(module, name, nn.Parameter(odd(value, kind)[1].detach()))


@PROPERTY
@example(dtype=torch.float64, momentum=0.1, affine=True, track=True, cl_params=True,
         strided_bn=True, kinds=("channels_last",) * 4, modes=[True, False],
         conv={"stride": 1, "padding": 1, "groups": 1}, seed=0)  # the case
@given(dtype=DTYPES, momentum=st.sampled_from([0.1, None, 1.0]), affine=st.booleans(),
       track=st.booleans(), cl_params=st.booleans(), strided_bn=st.booleans(),
       kinds=layouts(4), modes=st.lists(st.booleans(), min_size=1, max_size=3),
       conv=st.fixed_dictionaries({"stride": st.integers(1, 2), "padding": st.integers(0, 1),
                                   "groups": st.integers(1, 2)}),
       seed=st.integers(0, 2**16))
def test_fused_conv_bn_layer_equals_the_module_pair_in_any_layout(
        dtype, momentum, affine, track, cl_params, strided_bn, kinds, modes, conv, seed):
    torch.manual_seed(seed)
    options = {"momentum": momentum, "affine": affine, "track_running_stats": track}
    fused = FusedConvBN2d(2, 4, 3, **conv, **options, dtype=dtype)
    pair = nn.Sequential(nn.Conv2d(2, 4, 3, **conv, bias=False, dtype=dtype),
                         nn.BatchNorm2d(4, **options, dtype=dtype))
    if strided_bn and affine:  # every other element of a bigger tensor
        _odd_parameter(fused[1], "weight", "strided"), _odd_parameter(fused[1], "bias", "strided")
    if cl_params:
        fused.to(memory_format=torch.channels_last)
    x = odd(torch.randn(3, 2, 6, 5, dtype=dtype), kinds[0])[1].detach()
    side = [(n + 2 * conv["padding"] - 3) // conv["stride"] + 1 for n in (6, 5)]
    out_shape = (3, 4, *side)
    grad_outs = [odd(torch.randn(out_shape, dtype=dtype), kind)[1].detach()
                 for kind in kinds[1:1 + len(modes)]]
    _both(fused, pair, x, grad_outs, modes, dtype)


@PROPERTY
@given(dtype=DTYPES, bias=st.booleans(), kinds=layouts(3), seed=st.integers(0, 2**16))
def test_linear_layer_equals_nn_linear_in_any_layout(dtype, bias, kinds, seed):
    torch.manual_seed(seed)
    ours, twin = Linear(3, 4, bias, dtype=dtype), nn.Linear(3, 4, bias, dtype=dtype)
    _odd_parameter(ours, "weight", kinds[2])
    x = odd(torch.randn(2, 5, 3, dtype=dtype), kinds[0])[1].detach()
    grad_out = odd(torch.randn(2, 5, 4, dtype=dtype), kinds[1])[1].detach()
    _both(ours, twin, x, [grad_out], [True], dtype)
