"""Bad input gets a ValueError/TypeError naming the op and the problem, for both impls."""

import re

import pytest
import torch

from models.layers import Linear, ReLU
from models.ops import legendre_p3, linear, relu, relu_masked
from models.ops.exhibits import cube, mul_constant

IMPLS = ["custom", "builtin"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("name", "fn"),
    [("legendre_p3", legendre_p3), ("relu", relu), ("relu_masked", relu_masked), ("cube", cube)],
)
def test_unary_rejects_integer_and_non_tensor(name, fn, impl):
    with pytest.raises(TypeError, match=rf"{name}: x must have a floating-point dtype \(float16, bfloat16, float32, float64\), got torch.int64"):
        fn(torch.arange(3), impl=impl)
    with pytest.raises(TypeError, match=rf"{name}: x must be a torch.Tensor, got list"):
        fn([1.0, 2.0], impl=impl)


@pytest.mark.parametrize(
    ("name", "fn"), [("legendre_p3", legendre_p3), ("relu", relu), ("relu_masked", relu_masked)]
)
def test_unknown_impl(name, fn):
    with pytest.raises(ValueError, match=rf"{name}: impl must be one of \('custom', 'builtin'\), got 'fast'"):
        fn(torch.randn(2), impl="fast")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "b_shape", "message"),
    [
        ((4, 5), (3, 4), None, "x's last dim must equal weight's in_features=4, got x of shape (4, 5)"),
        ((), (3, 4), None, "x's last dim must equal weight's in_features=4, got x of shape ()"),
        ((2, 4), (3, 4, 1), None, "weight must be 2-D (out_features, in_features), got shape (3, 4, 1)"),
        ((2, 4), (4,), None, "weight must be 2-D"),
        ((2, 4), (3, 4), (4,), "bias must have shape (3,) to match weight's out_features, got (4,)"),
        ((2, 4), (3, 4), (1, 3), "bias must have shape (3,)"),
    ],
)
def test_linear_shape_errors(impl, x_shape, w_shape, b_shape, message):
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    b = torch.randn(b_shape) if b_shape else None
    with pytest.raises(ValueError, match="linear: " + re.escape(message)):
        linear(x, w, b, impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
def test_linear_dtype_errors(impl):
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    with pytest.raises(TypeError, match=r"linear: x must have a floating-point dtype \(.*\), got torch.int32"):
        linear(x.int(), w, impl=impl)
    with pytest.raises(TypeError, match="linear: weight has dtype torch.float64 but x has torch.float32"):
        linear(x, w.double(), impl=impl)
    with pytest.raises(TypeError, match="linear: bias has dtype torch.float16"):
        linear(x, w, torch.zeros(3, dtype=torch.float16), impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", [torch.tensor(2.0), True, "2", None, 1j])
def test_mul_constant_needs_a_real_number(impl, bad):
    with pytest.raises(TypeError, match="mul_constant: c must be a real Python number"):
        mul_constant(torch.randn(3), bad, impl=impl)


def test_module_arguments_are_checked():
    with pytest.raises(ValueError, match="Linear: impl must be one of"):
        Linear(3, 4, impl="Custom")
    with pytest.raises(ValueError, match="Linear: in_features must be a positive int, got 0"):
        Linear(0, 4)
    with pytest.raises(ValueError, match="Linear: out_features must be a positive int, got 2.0"):
        Linear(3, 2.0)
    with pytest.raises(ValueError, match="ReLU: impl must be one of"):
        ReLU(impl="torch")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_linear_device_mismatch():
    with pytest.raises(ValueError, match="linear: weight is on cuda:0 but x is on cpu"):
        linear(torch.randn(2, 4), torch.randn(3, 4, device="cuda"))
