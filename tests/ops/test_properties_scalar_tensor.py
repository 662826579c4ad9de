"""Property tests for ScalarTensor against its dense tensor: "bad tensors".

The rules they check are in tests/property_checks.py.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from models.ops.exhibits import ScalarTensor
from tests.helpers.property_checks import (
    PROPERTY_MARKS,
    props,
)
from tests.helpers.strategies import (
    Outcome,
    assert_clear_error,
    assert_close_bound,
    tensors,
)

pytestmark = PROPERTY_MARKS

# =============================================================================================
# ScalarTensor: the torch functions it handles agree with its dense N×N tensor
# =============================================================================================


@props(60)
@given(data=st.data())
def test_scalar_tensor_matches_dense_or_raises_clearly(data):
    draw = data.draw
    n = draw(st.one_of(st.integers(1, 4), st.sampled_from([0, -2, True, 2.0, None])), label="N")
    value = draw(
        st.one_of(
            st.floats(-1e3, 1e3),
            st.integers(-5, 5),
            st.sampled_from([True, "1", None, torch.tensor(1.0), Fraction(1, 2), 2**70]),
        ),
        label="value",
    )
    made = Outcome(ScalarTensor, n, value)
    if not made.ok:
        assert_clear_error(made.error, "ScalarTensor")
        return
    s = made.value
    m = draw(st.sampled_from([n, n + 1]), label="other N")
    other_shape = draw(st.sampled_from([(n, n), (m, n), (n,), (2, n, n), (m,), ()]))
    # Mostly the dense twin's float32; other dtypes check promotion (mul) and refusal (mm).
    dtype = draw(st.sampled_from([torch.float32] * 4 + [torch.float64, torch.float16, torch.int64]))
    other = draw(tensors(other_shape, dtype, "cpu", requires_grad=False)).tensor
    other_value = draw(st.floats(-10, 10), label="other value")
    if m != n:
        # Deliberately stricter than dense N = 1 broadcasting: value·I of different sizes.
        error = Outcome(torch.add, s, ScalarTensor(m, other_value)).error
        assert_clear_error(error, "torch.add", kind=ValueError)
    calls = {
        "mean": (torch.mean, s),
        "diagonal": (
            torch.diagonal,
            s,
            draw(st.integers(-4, 4), label="offset"),
            *draw(st.lists(st.integers(-3, 2), max_size=2), label="dim1, dim2"),
        ),
        "add": (torch.add, s, ScalarTensor(n, other_value)),
        "mul": (torch.mul, s, other),
        "mul_number": (torch.mul, s, other_value),
        "matmul": (torch.matmul, s, other),
        "rmatmul": (torch.matmul, other, s),
        "mm": (torch.mm, s, other),
    }
    name = draw(st.sampled_from(sorted(calls)), label="function")
    fn, *args = calls[name]
    dense_args = [a.tensor() if isinstance(a, ScalarTensor) else a for a in args]
    got, want = Outcome(fn, *args), Outcome(fn, *dense_args)
    event(f"{name}: dense " + ("ran" if want.ok else "raised"))
    if not want.ok:
        assert not got.ok, f"torch.{fn.__name__} took a ScalarTensor its dense twin refuses"
        if type(got.error) is not type(want.error):  # else: the dense fallback's own error
            assert_clear_error(got.error, f"torch.{fn.__name__}")
        return
    assert got.ok, f"torch.{fn.__name__} on a ScalarTensor failed: {got.error!r}"
    result = got.value.tensor() if isinstance(got.value, ScalarTensor) else got.value
    # The dense twin rounds value to float32 first, ScalarTensor computes in Python floats:
    # a couple of roundings of the terms (for add, of both operands).
    bound = dense_args[0].abs() + dense_args[1].abs() if name == "add" else want.value.abs()
    assert_close_bound(result, want.value, bound, torch.float32, k=4, what=name)


MM, MATMUL, DIAGONAL = "torch.mm", "torch.matmul", "torch.diagonal"
VALUES, VALUE_IDS = [2, -3.5, -0.0], ["int", "float", "neg-zero"]


@pytest.mark.parametrize(
    ("name", "call"),
    [
        (MM, lambda s: torch.mm(s, torch.ones(3))),
        (MM, lambda s: torch.mm(s, torch.ones(2, 3, 3))),
        (MM, lambda s: torch.mm(torch.ones(2, 3, 3), s)),
        (MM, lambda s: torch.mm(s, torch.ones(2, 3))),
        (MM, lambda s: torch.mm(s, torch.ones(3, 2, dtype=torch.float64))),
        (MATMUL, lambda s: torch.matmul(torch.ones(2, 3, dtype=torch.int64), s)),
        (MATMUL, lambda s: torch.matmul(s, torch.tensor(1.0))),
        (MATMUL, lambda s: torch.matmul(torch.ones(2, 2), s)),
        (DIAGONAL, lambda s: torch.diagonal(s, 0, 0, 2)),
        (DIAGONAL, lambda s: torch.diagonal(s, 0, -3, 1)),
        (DIAGONAL, lambda s: torch.diagonal(s, 0, 1, -1)),
    ],
    ids=[
        "mm-vector",
        "mm-3d",
        "rmm-3d",
        "mm-sizes",
        "mm-dtype",
        "rmatmul-dtype",
        "matmul-0d",
        "rmatmul-sizes",
        "diagonal-dim2-2",
        "diagonal-dim1--3",
        "diagonal-same-dim",
    ],
)
def test_scalar_tensor_raises_clearly_where_dense_raises(name, call):
    """Found by the property above (mm took 1-D/3-D operands, diagonal ignored dim1/dim2, the
    mm size error said torch.matmul): where the dense twin raises, a clear error naming the
    function called; out-of-range dims are IndexErrors too, like the dense twin's."""
    s = ScalarTensor(3, 2)
    want = Outcome(call, s.tensor())
    assert not want.ok, "the dense twin should refuse this call"
    got = Outcome(call, s)
    assert_clear_error(got.error, name)
    if isinstance(want.error, IndexError):
        assert isinstance(got.error, IndexError), got.error


@pytest.mark.parametrize(
    "call",
    [
        lambda s: torch.diagonal(s),
        lambda s: torch.diagonal(s, -1),
        lambda s: torch.diagonal(s, 1, 1, 0),
        lambda s: torch.diagonal(s, offset=-2, dim1=-1, dim2=-2),
        lambda s: torch.diagonal(s, torch.tensor(1), 0, 1),
        lambda s: torch.diagonal(s, 7),
        lambda s: torch.mul(s, torch.arange(9.0).reshape(3, 3)),
        lambda s: torch.mul(torch.arange(9, dtype=torch.int64).reshape(3, 3), s),
        lambda s: torch.mul(s, torch.full((3, 3), float("inf"), dtype=torch.float64)),
        lambda s: torch.mul(s, torch.ones(3, 3, dtype=torch.float16)),
    ],
)
@pytest.mark.parametrize("value", VALUES, ids=VALUE_IDS)
def test_scalar_tensor_matches_dense_values_and_dtype(value, call):
    """An int value's diagonal has the dense float dtype (was int64); signed zeros, nans and
    promoted dtypes are the dense twin's too."""
    s = ScalarTensor(3, value)
    got, want = call(s), call(s.tensor())
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got.signbit(), want.signbit()), (got, want)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: torch.mm(s, torch.arange(6.0).reshape(3, 2)),
        lambda s: torch.mm(torch.arange(6.0).reshape(2, 3), s),
        lambda s: torch.matmul(s, torch.arange(3.0)),
        lambda s: torch.matmul(torch.arange(3.0), s),
        lambda s: torch.matmul(s, torch.arange(18.0).reshape(2, 3, 3)),
        lambda s: torch.matmul(torch.arange(12.0).reshape(2, 2, 3), s),
    ],
)
@pytest.mark.parametrize("value", VALUES, ids=VALUE_IDS)
def test_scalar_tensor_matrix_products_match_dense(value, call):
    """mm/matmul keep the dense shapes and dtype (an int value included); the sign of a zero
    result may differ, as the dense sum adds the 0·x terms of the off-diagonal."""
    s = ScalarTensor(3, value)
    got, want = call(s), call(s.tensor())
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
