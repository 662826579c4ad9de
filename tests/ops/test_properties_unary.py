"""Property tests for the unary ops (legendre_p3, relu, cube, mul_constant): "bad tensors".

The rules they check are in tests/property_checks.py.
"""

from __future__ import annotations

import decimal
import fractions

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from models.ops import fused_conv_bn2d, legendre_p3, linear, relu, relu_masked
from models.ops.exhibits import cube, legendre_p3_numpy, mul_constant
from tests.helpers.property_checks import (
    OP,
    PROPERTY_MARKS,
    assert_unchanged,
    compare,
    grads,
    props,
    snapshot,
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
# Unary ops: legendre_p3, relu, cube, mul_constant
# =============================================================================================

# Real numbers mul_constant takes: Python ints and floats (nan, ±inf, -0.0, subnormals, huge).
CONSTANTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**20), 2**20),
    st.fractions(max_denominator=1000),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 5e-324, 1e300]),
)
BAD_CONSTANTS = st.sampled_from(
    [True, False, 1j, "2", None, torch.tensor(2.0), [2.0], decimal.Decimal(2)]
)


# Layouts the ops refuse (they take strided tensors only), as conversions of a strided x.
NON_STRIDED = {
    "sparse_coo": torch.Tensor.to_sparse,
    "sparse_csr": torch.Tensor.to_sparse_csr,
    "mkldnn": torch.Tensor.to_mkldnn,
}


def to_non_strided(x: torch.Tensor, kind: str) -> torch.Tensor:
    """x in the `kind` layout, or as sparse COO where that layout cannot hold x's dims/dtype."""
    try:
        return NON_STRIDED[kind](x.detach())
    except (RuntimeError, IndexError):  # CSR needs ≥ 2 dims, mkldnn no float64 or 0-d
        return x.detach().to_sparse()


# name -> (op, the op on |x| (the size of its terms, for the error bound), non-finite inputs
# and incoming gradients?)
# Exact ops (relu, mul_constant: one rounding, same as the twin) get a zero bound. legendre_p3
# gets finite inputs only: at ±inf the built-in ½(5x³ − 3x) is inf − inf = nan while the custom
# x·(2.5x² − 1.5) gives ±inf - a deliberate difference (the custom is right), not a bug.
UNARY = {
    "legendre_p3": (legendre_p3, lambda x: 0.5 * (5 * x**3 + 3 * x), False),
    "legendre_p3_numpy": (legendre_p3_numpy, lambda x: 0.5 * (5 * x**3 + 3 * x), False),
    "cube": (cube, lambda x: x**3, True),
    "relu": (relu, None, True),
    "relu_masked": (relu_masked, None, True),
    "mul_constant": (mul_constant, None, True),
}


@pytest.mark.parametrize("name", UNARY)
@props(80)
@given(data=st.data())
def test_unary_op_matches_builtin_or_raises_clearly(name, data):
    op, abs_problem, special = UNARY[name]
    draw = data.draw
    extra = (draw(CONSTANTS, label="c"),) if name == "mul_constant" else ()
    cases = ["float"] * 8 + ["non_float", "non_tensor", "bad_impl", "non_strided"]
    case = draw(st.sampled_from(cases + ["bad_constant"] * bool(extra)), label="case")
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from(NON_FLOATS if case == "non_float" else FLOATS), label="dtype")
    shape = draw(shapes(), label="shape")
    # |x| up to ~10: x³ (and the twin's 5x³) stays finite even in float16.
    scale = draw(st.sampled_from([1e-3, 1.0, 3.0]), label="scale")
    x = draw(tensors(shape, dtype, device, scale=scale, special=special), label="x")
    arg = x.tensor
    if case == "non_tensor":
        arg = draw(NON_TENSORS, label="x")
    if case == "non_strided":
        arg = to_non_strided(arg, draw(st.sampled_from(sorted(NON_STRIDED)), label="layout"))
    if case == "bad_constant":
        extra = (draw(BAD_CONSTANTS, label="c"),)
    if case == "bad_impl":
        bad = draw(BAD_IMPLS, label="impl")
        assert_clear_error(Outcome(op, arg, *extra, impl=bad).error, name, kind=ValueError)
        return

    before = snapshot([x])
    custom = Outcome(op, arg, *extra, impl="custom")
    builtin = Outcome(op, arg, *extra, impl="builtin")
    if case != "float":
        assert_same_error(custom, builtin, name, kind=TypeError)
        return
    assert custom.ok, f"{name} rejected a valid input: {custom.error!r}"
    assert builtin.ok, f"{name}(impl='builtin') rejected a valid input: {builtin.error!r}"
    out_c, out_b = custom.value, builtin.value
    assert out_c.requires_grad == out_b.requires_grad == x.leaf.requires_grad
    g = grad_output(draw, out_b, special=special)  # non-finite gradients too, where allowed
    grads_c, grads_b = grads(out_c, [x.leaf], g), grads(out_b, [x.leaf], g)

    if abs_problem is None:
        bounds = [0.0] * (1 + len(grads_b))
    else:  # the op on |x| bounds the forward error; its gradient for |g|, the backward's
        lx, vx = x.abs64()
        out_abs = abs_problem(vx)
        bounds = [out_abs.detach(), *grads(out_abs, [lx], g.to("cpu", torch.float64).abs())]
    compare([out_c, *grads_c], [out_b, *grads_b], bounds, dtype, name)
    assert_unchanged(before, [x])


FLOAT8 = torch.float8_e4m3fn


@pytest.mark.parametrize(
    "name", ["legendre_p3", "legendre_p3_numpy", "cube", "relu", "relu_masked", "mul_constant", OP]
)
def test_float8_rejected_clearly(name):
    x = torch.zeros(2, 3, 4, 4).to(FLOAT8)
    calls = {
        "legendre_p3": lambda impl: legendre_p3(x, impl=impl),
        "legendre_p3_numpy": lambda impl: legendre_p3_numpy(x, impl=impl),
        "cube": lambda impl: cube(x, impl=impl),
        "relu": lambda impl: relu(x, impl=impl),
        "relu_masked": lambda impl: relu_masked(x, impl=impl),
        "mul_constant": lambda impl: mul_constant(x, 2.0, impl=impl),
        OP: lambda impl: fused_conv_bn2d(
            x, torch.zeros(2, 3, 1, 1).to(FLOAT8), training=True, impl=impl
        ),
    }
    for impl in ("custom", "builtin"):
        with pytest.raises(TypeError, match=f"^{name}: "):
            calls[name](impl)


@pytest.mark.parametrize("relu", [relu, relu_masked])
def test_relu_backward_non_finite_grad_where_inactive(relu):
    """Found by the unary property: a nan/inf incoming gradient where
    x <= 0 gives 0 like torch.relu's, not nan (0·inf) as multiplying by the mask did."""
    x = torch.tensor([-1.0, -2.0, 3.0, -0.0], requires_grad=True)
    g = torch.tensor([float("nan"), float("inf"), 1.0, -float("inf")])
    (expected,) = torch.autograd.grad(relu(x, impl="builtin"), x, g)
    (got,) = torch.autograd.grad(relu(x), x, g)
    assert torch.equal(got, expected), (got, expected)  # [0, 0, 1, 0]


@pytest.mark.parametrize("c", [10**400, fractions.Fraction(1, 3)], ids=["huge-int", "Fraction"])
def test_mul_constant_real_numbers(c):
    x = torch.ones(3)
    custom, builtin = Outcome(mul_constant, x, c), Outcome(mul_constant, x, c, impl="builtin")
    if custom.ok or builtin.ok:
        assert custom.ok and builtin.ok
        torch.testing.assert_close(custom.value, builtin.value)
    else:
        assert_same_error(custom, builtin, "mul_constant")


SPARSE_CALLS = {
    "relu": lambda x, impl: relu(x, impl=impl),
    "relu_masked": lambda x, impl: relu_masked(x, impl=impl),
    "legendre_p3": lambda x, impl: legendre_p3(x, impl=impl),
    "cube": lambda x, impl: cube(x, impl=impl),
    "mul_constant": lambda x, impl: mul_constant(x, 2.0, impl=impl),
    "linear": lambda x, impl: linear(x, torch.ones(3, 2), impl=impl),
    "linear-weight": lambda x, impl: linear(torch.ones(3, 2), x, impl=impl),
}


@pytest.mark.parametrize("kind", NON_STRIDED)
@pytest.mark.parametrize("call", SPARSE_CALLS)
def test_non_strided_input_rejected_clearly(call, kind):
    """Found by the unary property: a sparse COO input failed inside aten for custom relu
    (clamp_min) and legendre_p3 (add) while the built-ins ran; the ops take dense tensors
    only, and both impls say so."""
    x = to_non_strided(torch.tensor([[0.0, -1.5], [2.0, 0.0], [1.0, 3.0]]), kind)
    custom, builtin = (Outcome(SPARSE_CALLS[call], x, impl) for impl in ("custom", "builtin"))
    op, name = ("linear", "weight") if call == "linear-weight" else (call, "x")
    assert_same_error(custom, builtin, op, kind=TypeError)
    assert str(custom.error) == (
        f"{op}: {name} must be a dense (strided) tensor, got {x.layout}; "
        f"call {name}.to_dense() first"
    )
