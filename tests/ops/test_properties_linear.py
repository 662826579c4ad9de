"""Property tests for the linear op: "bad tensors".

The rules they check are in tests/property_checks.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from models.ops import (
    linear,
)
from tests.helpers.property_checks import (
    PROPERTY_MARKS,
    abs64,
    assert_unchanged,
    compare,
    grads,
    leaves,
    other_device,
    props,
    snapshot,
    t,
)
from tests.helpers.strategies import (
    BAD_IMPLS,
    DEVICES,
    FLOATS,
    NON_FLOATS,
    NON_TENSORS,
    Outcome,
    assert_clear_error,
    assert_same_error,
    grad_output,
    shapes,
    tensors,
)

pytestmark = PROPERTY_MARKS

# =============================================================================================
# linear
# =============================================================================================

LINEAR_BAD = {  # mutation of a valid call -> the error class both impls must raise
    "last_dim": ValueError,
    "x_0d": ValueError,
    "weight_dims": ValueError,
    "bias_shape": ValueError,
    "dtype_mix": TypeError,
    "non_float": TypeError,
    "non_tensor": TypeError,
    "bad_impl": ValueError,
    **({"device_mix": ValueError} if len(DEVICES) > 1 else {}),
}


@props(120)
@given(data=st.data())
def test_linear_matches_builtin_or_raises_clearly(data):
    draw = data.draw
    case = draw(st.sampled_from(["valid"] * 5 + list(LINEAR_BAD)), label="case")
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from(FLOATS), label="dtype")
    in_f, out_f = draw(st.integers(0, 5), label="in"), draw(st.integers(0, 5), label="out")
    batch = draw(shapes(0, 3), label="batch")
    has_bias = draw(st.booleans(), label="bias")
    shape = {"x": (*batch, in_f), "weight": (out_f, in_f), "bias": (out_f,)}
    dtypes = dict.fromkeys(shape, dtype)
    devs = dict.fromkeys(shape, device)
    if case == "last_dim":
        shape["x"] = (*batch, draw(st.integers(0, 6).filter(lambda n: n != in_f)))
    elif case == "x_0d":
        shape["x"] = ()
    elif case == "weight_dims":
        shape["weight"] = draw(shapes(0, 4, 1, 3).filter(lambda s: len(s) != 2))
    elif case == "bias_shape":  # includes shapes F.linear would broadcast: nn.Linear's are exact
        has_bias = True
        wrong = [(out_f + 1,), (), (1, out_f), (out_f, 1), (0,)] + [(1,)] * (out_f != 1)
        shape["bias"] = draw(st.sampled_from(wrong))
    elif case in ("dtype_mix", "non_float", "device_mix", "non_tensor"):
        which = draw(st.sampled_from(["x", "weight", "bias"]), label="which")
        if case in ("dtype_mix", "device_mix") and which == "x":
            which = "weight"
        has_bias = has_bias or which == "bias"
        if case == "dtype_mix":
            dtypes[which] = draw(st.sampled_from([d for d in FLOATS if d != dtype]))
        elif case == "non_float":
            dtypes[which] = draw(st.sampled_from(NON_FLOATS))
        elif case == "device_mix":
            devs[which] = other_device(device)
    args = {
        k: draw(tensors(shape[k], dtypes[k], devs[k]), label=k)
        for k in ("x", "weight", "bias")
        if k != "bias" or has_bias
    }
    x, w, b = args["x"], args["weight"], args.get("bias")
    call = [x.tensor, w.tensor, t(b)]
    if case == "non_tensor":
        bad = NON_TENSORS if which != "bias" else NON_TENSORS.filter(lambda v: v is not None)
        call[["x", "weight", "bias"].index(which)] = draw(bad, label="non_tensor")
    if case == "bad_impl":
        error = Outcome(linear, *call, impl=draw(BAD_IMPLS)).error
        assert_clear_error(error, "linear", kind=ValueError)
        return

    before = snapshot([x, w, b])
    custom = Outcome(linear, *call, impl="custom")
    builtin = Outcome(linear, *call, impl="builtin")
    if case != "valid":
        assert_same_error(custom, builtin, "linear", kind=LINEAR_BAD[case])
        return
    assert Outcome(F.linear, *call).ok  # the strategy's valid calls are valid for torch too
    assert custom.ok, f"linear rejected a valid call: {custom.error!r}"
    assert builtin.ok, f"linear(impl='builtin') rejected a valid call: {builtin.error!r}"
    g = grad_output(draw, builtin.value)
    leafs = leaves(x, w, b)
    grads_c, grads_b = grads(custom.value, leafs, g), grads(builtin.value, leafs, g)

    # Error bound: |x|·|W|ᵀ + |b| (dot-product terms) and its gradients for |g|.
    (lx, vx), (lw, vw), (lb, vb) = abs64(x), abs64(w), abs64(b)
    out_abs = F.linear(vx, vw, vb)
    bounds = [out_abs.detach(), *grads(out_abs, [lx, lw, lb], g.to("cpu", torch.float64).abs())]
    n = max(x.tensor.numel(), w.tensor.numel())  # the longest sum (x·Wᵀ, grad_W, grad_b)
    compare([custom.value, *grads_c], [builtin.value, *grads_b], bounds, dtype, "linear", n)
    assert_unchanged(before, [x, w, b])


@pytest.mark.parametrize("in_f, out_f", [(4, 0), (0, 2)], ids=["out_features=0", "in_features=0"])
def test_linear_zero_features_backward(in_f, out_f):
    x = torch.randn(3, in_f, requires_grad=True)
    w = torch.randn(out_f, in_f, requires_grad=True)
    b = torch.randn(out_f, requires_grad=True)
    for impl in ("builtin", "custom"):
        out = linear(x, w, b, impl=impl)
        gx, gw, gb = torch.autograd.grad(out, (x, w, b), torch.ones_like(out))
        assert gx.shape == x.shape and gw.shape == w.shape and gb.shape == b.shape
