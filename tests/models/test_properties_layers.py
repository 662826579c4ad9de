"""Property tests for the layers (Linear, ReLU, FusedConvBN2d) against their nn twins:
"bad tensors".

The rules they check are in tests/property_checks.py.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import event, given
from hypothesis import strategies as st
from torch import nn

from models.layers import FusedConvBN2d, Linear, ReLU
from tests.helpers.property_checks import (
    OP,
    PROPERTY_MARKS,
    abs_param,
    bf16_depthwise_multiplier_bug,
    bn_grad_output,
    compare,
    conv_bn_eval_abs,
    grads,
    int_or_pair,
    mostly,
    per_tensor,
    props,
)
from tests.helpers.strategies import (
    BAD_IMPLS,
    DEVICES,
    FLOATS,
    NON_FLOATS,
    Outcome,
    assert_clear_error,
    grad_output,
    shapes,
    tensors,
)

pytestmark = PROPERTY_MARKS

# =============================================================================================
# Layers: Linear, ReLU, FusedConvBN2d against nn.Linear, nn.ReLU, nn.Conv2d → nn.BatchNorm2d
# =============================================================================================

BAD_SIZES = [0, -1, True, 2.0, None, "3"]
# The parameters' dtype: None (the default), a float dtype, or now and then a non-float one
# (or no dtype at all), which the constructors refuse.
LAYER_DTYPES = mostly(st.sampled_from([None, *FLOATS]), st.sampled_from([*NON_FLOATS, "float32"]))


def impls():
    return mostly(st.sampled_from(["custom", "builtin"]), BAD_IMPLS)


def layer_input(draw, device, dtype, shape):
    """x for a layer: usually the module's dtype and given shape, sometimes neither."""
    kind = draw(st.sampled_from(["ok"] * 6 + ["dtype", "shape"]), label="x kind")
    if kind == "dtype":
        dtype = draw(st.sampled_from([d for d in (*FLOATS, *NON_FLOATS) if d != dtype]))
    if kind == "shape":
        shape = draw(shapes(0, 5, 0, 4))
    return draw(tensors(shape, dtype, device), label="x")


def module_twin_step(draw, ours, twin, x, names, dtype, bound_fn=None):
    """ours(x) vs twin(x): if the twin fails, ours raises a clear error; else they match
    (output, parameter and input gradients, buffers)."""
    ref = Outcome(twin, x.tensor)
    out = Outcome(ours, x.tensor)
    event(f"{names[0]}: twin " + ("ran" if ref.ok else "raised"))
    if x.tensor.dtype != dtype:
        # Deliberately stricter than the twins, which let an empty input of any dtype through.
        # (A TypeError, unless a bad constructor argument is reported first.)
        assert_clear_error(out.error, *names)
        return False
    if not ref.ok:
        assert_clear_error(out.error, *names)
        return False
    assert out.ok, f"{names[0]} rejected an input its twin takes: {out.error!r}"
    if isinstance(ours, FusedConvBN2d) and bf16_depthwise_multiplier_bug(
        x.tensor, ours.conv.weight, ours.conv.groups, ref.value
    ):
        return False
    g = (bn_grad_output if isinstance(ours, FusedConvBN2d) else grad_output)(draw, ref.value)
    params_o, params_t = list(ours.parameters()), list(twin.parameters())
    grads_o = grads(out.value, [x.leaf, *params_o], g)
    grads_t = grads(ref.value, [x.leaf, *params_t], g)
    buffers_o = [b for b in ours.buffers() if b.is_floating_point()]
    buffers_t = [b for b in twin.buffers() if b.is_floating_point()]
    if bound_fn is None:
        bounds = per_tensor([ref.value, *grads_t, *buffers_t])
    else:
        bounds = bound_fn(g)
        bounds = [*bounds, *per_tensor(buffers_t)]
    n = max([ref.value.numel(), *(p.numel() for p in params_t)])  # the longest sum
    compare(
        [out.value, *grads_o, *buffers_o],
        [ref.value, *grads_t, *buffers_t],
        bounds,
        dtype,
        names[0],
        n,
    )
    for a, b in zip(ours.buffers(), twin.buffers(), strict=True):
        if not a.is_floating_point():
            assert torch.equal(a, b)  # num_batches_tracked
    return True


@props(60)
@given(data=st.data())
def test_linear_layer_matches_nn_linear_or_raises_clearly(data):
    # Module init draws from the global RNG: seed it per example (and leave it as it was).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(data.draw(st.integers(0, 2**32 - 1), label="init seed"))
        _linear_layer_matches_nn_linear_or_raises_clearly(data.draw)


def _linear_layer_matches_nn_linear_or_raises_clearly(draw):
    device = draw(st.sampled_from(DEVICES), label="device")
    size = mostly(st.integers(1, 4), st.sampled_from(BAD_SIZES))
    in_f, out_f = draw(size, label="in_features"), draw(size, label="out_features")
    bias = draw(st.sampled_from([True, False, 1, 0]), label="bias")
    impl = draw(impls(), label="impl")
    dtype = draw(LAYER_DTYPES, label="dtype")
    made = Outcome(Linear, in_f, out_f, bias=bias, impl=impl, device=device, dtype=dtype)
    event("constructed" if made.ok else "constructor raised")
    if not made.ok:
        assert_clear_error(made.error, "Linear")
        return
    ours = made.value
    assert isinstance(in_f, int) and in_f > 0 and isinstance(out_f, int) and out_f > 0
    assert impl in ("custom", "builtin")
    assert dtype is None or dtype in FLOATS
    twin = nn.Linear(in_f, out_f, bias=bool(bias), device=device, dtype=dtype)
    twin.load_state_dict(ours.state_dict())
    dtype = ours.weight.dtype
    batch = draw(shapes(0, 3), label="batch")
    x = layer_input(draw, device, dtype, (*batch, in_f))

    def bounds(g):
        lx, vx = x.abs64()
        w, b = abs_param(ours.weight), abs_param(ours.bias)
        out = F.linear(vx, w, b)
        return [out.detach(), *grads(out, [lx, w, b], g.to("cpu", torch.float64).abs())]

    module_twin_step(draw, ours, twin, x, ("Linear", "linear"), dtype, bounds)


@props(50)
@given(data=st.data())
def test_relu_layer_matches_nn_relu_or_raises_clearly(data):
    draw = data.draw
    impl = draw(impls(), label="impl")
    made = Outcome(ReLU, impl=impl)
    if not made.ok:
        assert_clear_error(made.error, "ReLU", kind=ValueError)
        return
    assert impl in ("custom", "builtin")
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from([*FLOATS, *NON_FLOATS]), label="dtype")
    x = draw(tensors(draw(shapes()), dtype, device, special=True), label="x")
    if not dtype.is_floating_point:  # deliberately stricter than torch.relu
        assert_clear_error(Outcome(made.value, x.tensor).error, "ReLU", "relu", kind=TypeError)
        return
    exact = [0.0, *[0.0] * x.leaf.requires_grad]  # max(x, 0) and its mask: no rounding
    module_twin_step(draw, made.value, nn.ReLU(), x, ("ReLU", "relu"), dtype, lambda g: exact)


@st.composite
def conv_layer_args(draw):
    """FusedConvBN2d(...) keyword arguments: mostly valid, sometimes one bad value."""
    groups = draw(st.integers(1, 3))
    kw = {
        "in_channels": groups * draw(st.integers(1, 2)),
        "out_channels": groups * draw(st.integers(1, 2)),
        "kernel_size": draw(int_or_pair(1, 3)),
        "stride": draw(int_or_pair(1, 2)),
        "padding": draw(st.one_of(int_or_pair(0, 2), st.just("valid"))),
        "dilation": draw(int_or_pair(1, 2)),
        "groups": groups,
        "eps": draw(st.sampled_from([1e-5, 1e-3, 0.1])),
        "momentum": draw(st.sampled_from([0.1, None, 0.0, 1.0])),
        "affine": draw(st.booleans()),
        "track_running_stats": draw(st.booleans()),
        "impl": draw(st.sampled_from(["custom", "builtin"])),
        "dtype": draw(LAYER_DTYPES),
    }
    if draw(st.booleans()):  # 'same' is only for stride 1 (else the "same_strided" case)
        kw.update(padding="same", stride=1)
    bad = draw(
        st.sampled_from(
            ["none"] * 9
            + [
                "in_channels",
                "out_channels",
                "groups",
                "impl",
                "indivisible",
                "kernel_size",
                "stride",
                "padding",
                "same_strided",
                "dilation",
                "momentum",
            ]
        )
    )
    if bad in ("in_channels", "out_channels", "groups"):
        kw[bad] = draw(st.sampled_from(BAD_SIZES))
    elif bad == "impl":
        kw["impl"] = draw(BAD_IMPLS)
    elif bad == "indivisible":
        kw.update(groups=2, in_channels=draw(st.sampled_from([1, 3, 2])), out_channels=3)
    elif bad == "kernel_size":
        kw[bad] = draw(st.sampled_from([0, -1, (0, 3), (3, -1), (3,), (3, 3, 3), "3", 2.0, None]))
    elif bad in ("stride", "dilation"):  # nn.Conv2d takes these (and fails later, if at all)
        kw[bad] = draw(st.sampled_from([0, -1, (1, 0), (1,), 1.0, "1", True]))
    elif bad == "padding":
        kw["padding"] = draw(st.sampled_from([-1, (0, -2), (1, 1, 1), 1.5, "full", "SAME", None]))
    elif bad == "same_strided":
        kw.update(padding="same", stride=draw(st.sampled_from([2, (1, 2), (2, 1)])))
    elif bad == "momentum":
        kw["momentum"] = draw(st.sampled_from(["0.1", [0.1]]))
    kw["bad"] = bad
    return kw


def pair_like(ours: FusedConvBN2d, kw) -> nn.Sequential:
    """nn.Sequential(nn.Conv2d(bias=False), nn.BatchNorm2d) with ours' config and state."""
    conv_kw = {k: kw[k] for k in ("stride", "padding", "dilation", "groups", "dtype")}
    twin = nn.Sequential(
        nn.Conv2d(
            kw["in_channels"],
            kw["out_channels"],
            kw["kernel_size"],
            **conv_kw,
            bias=False,
            device=ours.conv.weight.device,
        ),
        nn.BatchNorm2d(
            kw["out_channels"],
            kw["eps"],
            kw["momentum"],
            kw["affine"],
            kw["track_running_stats"],
            device=ours.conv.weight.device,
            dtype=kw["dtype"],
        ),
    )
    twin.load_state_dict(ours.state_dict())
    return twin


@props(60)
@given(data=st.data())
def test_fused_conv_bn_layer_matches_nn_pair_or_raises_clearly(data):
    # Module init draws from the global RNG: seed it per example (and leave it as it was).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(data.draw(st.integers(0, 2**32 - 1), label="init seed"))
        _fused_conv_bn_layer_matches_nn_pair_or_raises_clearly(data.draw)


def _fused_conv_bn_layer_matches_nn_pair_or_raises_clearly(draw):
    kw = draw(conv_layer_args(), label="kwargs")
    bad = kw.pop("bad")
    device = draw(st.sampled_from(DEVICES), label="device")
    made = Outcome(FusedConvBN2d, **kw, device=device)
    event("constructed" if made.ok else "constructor raised")
    if not made.ok:
        assert_clear_error(made.error, "FusedConvBN2d")
        return
    # Refused by the constructor, though nn.Conv2d takes some of them.
    assert bad not in ("kernel_size", "stride", "dilation", "padding", "same_strided")
    assert kw["dtype"] is None or kw["dtype"] in FLOATS
    ours = made.value
    twin = pair_like(ours, kw)
    train = draw(st.booleans(), label="train")
    ours.train(train), twin.train(train)
    dtype = ours.conv.weight.dtype
    batch_stats = train or not kw["track_running_stats"]
    n = draw(st.integers(0, 3), label="N")
    side = st.one_of(st.integers(4, 7), st.integers(1, 7))
    hw = draw(side, label="H"), draw(side, label="W")
    x = layer_input(draw, device, dtype, (n, kw["in_channels"], *hw))
    if bad == "momentum":
        # Accepted by nn.BatchNorm2d, refused by the forward - also where the twin lets an
        # empty input through.
        assert_clear_error(Outcome(ours, x.tensor).error, "FusedConvBN2d", OP)
        return

    def folded_bounds(g):
        """Eval with running stats: the custom folds BN into the conv (see check_conv_parity)."""
        conv, bn = ours.conv, ours.bn
        lx, vx = x.abs64()
        params = [abs_param(p) for p in (conv.weight, bn.weight, bn.bias)]
        stats = [abs_param(b).detach() for b in (bn.running_mean, bn.running_var)]
        out = conv_bn_eval_abs(
            vx, *params, *stats, bn.eps, conv.stride, conv.padding, conv.dilation, conv.groups
        )
        return [out.detach(), *grads(out, [lx, *params], g.to("cpu", torch.float64).abs())]

    for _ in range(draw(st.integers(1, 2), label="steps")):  # momentum=None averages steps
        bounds = None if batch_stats else folded_bounds
        if not module_twin_step(draw, ours, twin, x, ("FusedConvBN2d", OP), dtype, bounds):
            return


@pytest.mark.parametrize(
    "make, dtype",
    [
        (lambda: Linear(3, 4, dtype=torch.int64), "torch.int64"),
        (lambda: Linear(3, 4, dtype=torch.complex64), "torch.complex64"),
        (lambda: FusedConvBN2d(3, 4, 3, dtype=torch.int32), "torch.int32"),
        (lambda: FusedConvBN2d(3, 4, 3, dtype=torch.bool), "torch.bool"),
        (lambda: FusedConvBN2d(3, 4, 3, dtype="float32"), "'float32'"),
    ],
    ids=["Linear-int64", "Linear-complex64", "FusedConvBN2d-int32", "FusedConvBN2d-bool", "str"],
)
def test_layers_reject_non_float_dtype_clearly(make, dtype):
    """Not aten's 'Only Tensors of floating point ... can require gradients'."""
    with pytest.raises(
        TypeError,
        match=rf"^(Linear|FusedConvBN2d): dtype must be a floating-point dtype .* got {dtype}",
    ):
        make()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"padding": "full"}, "padding must be an int, a pair, 'valid' or 'same', got 'full'"),
        ({"padding": "same", "stride": 2}, "padding='same' is not supported for strided"),
        ({"padding": -1}, "padding must be an int ≥ 0 or a pair of them, got -1"),
        ({"kernel_size": -1}, "kernel_size must be an int ≥ 1 or a pair of them, got -1"),
        ({"kernel_size": "3"}, "kernel_size must be an int ≥ 1 or a pair of them, got '3'"),
        ({"kernel_size": 0}, "kernel_size must be an int ≥ 1 or a pair of them, got 0"),
        ({"kernel_size": (3, 0)}, "kernel_size must be an int ≥ 1 or a pair of them, got (3, 0)"),
        ({"stride": 0}, "stride must be an int ≥ 1 or a pair of them, got 0"),
        ({"dilation": (1, 0)}, "dilation must be an int ≥ 1 or a pair of them, got (1, 0)"),
    ],
    ids=[
        "padding-string",
        "same-strided",
        "padding-negative",
        "kernel-negative",
        "kernel-str",
        "kernel-0",
        "kernel-pair-0",
        "stride-0",
        "dilation-0",
    ],
)
def test_fused_conv_bn_layer_constructor_errors_name_the_class(kwargs, message):
    """Refused at construction (nn.Conv2d takes most of these, or raises its own message)."""
    kw = {"in_channels": 3, "out_channels": 4, "kernel_size": 3, **kwargs}
    with pytest.raises(ValueError, match="^FusedConvBN2d: " + re.escape(message)):
        FusedConvBN2d(**kw)
