"""legendre_p3_numpy: a once-differentiable torch.library custom op (NumPy, outside autograd).

First derivatives are checked like every other op's; any double backward raises a clear error
instead of returning a silently wrong (constant) result. The op passes torch.library.opcheck
and compiles into one graph.
"""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.autograd import gradcheck, gradgradcheck

from models.ops import legendre_p3, legendre_p3_builtin
from models.ops.exhibits import (
    LegendreP3NumPy,
    legendre_p3_numpy,
    legendre_p3_numpy_backward,
    once_differentiable,
)

SHAPES = [(7,), (3, 5), (2, 3, 4)]
DOUBLE_BACKWARD = "legendre_p3_numpy is once differentiable"


def _input(shape, device, non_contiguous=False, dtype=torch.float64):
    if non_contiguous:
        return torch.randn(*reversed(shape), dtype=dtype, device=device).mT.requires_grad_()
    return torch.randn(*shape, dtype=dtype, device=device, requires_grad=True)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("non_contiguous", [False, True])
def test_gradcheck(shape, non_contiguous, device):
    x = _input(shape, device, non_contiguous and len(shape) >= 2)
    assert gradcheck(legendre_p3_numpy, (x,))


def test_bfloat16_is_computed_in_float32_and_rounded_once():
    x = torch.linspace(-1.5, 1.5, 101, dtype=torch.bfloat16, requires_grad=True)
    out = legendre_p3_numpy(x)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, legendre_p3(x.detach().float()).bfloat16())
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert grad.dtype == torch.bfloat16
    torch.testing.assert_close(grad, (7.5 * x.detach().float() ** 2 - 1.5).bfloat16())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_legendre_p3_and_builtin(dtype, device):
    x = _input((4, 6), device, non_contiguous=True, dtype=dtype)
    g = torch.randn(4, 6, dtype=dtype, device=device)
    out = legendre_p3_numpy(x)
    assert out.device == x.device and out.dtype == dtype and out.shape == x.shape
    # Same kernel order as legendre_p3 (x·(2.5x² − 1.5)), so the same roundings.
    torch.testing.assert_close(out, legendre_p3(x), rtol=0, atol=0)
    (grad,) = torch.autograd.grad(out, x, g)
    (want,) = torch.autograd.grad(legendre_p3_builtin(x), x, g)
    torch.testing.assert_close(grad, want)
    (twin,) = torch.autograd.grad(legendre_p3_numpy(x, impl="builtin"), x, g)
    torch.testing.assert_close(twin, want, rtol=0, atol=0)


def test_double_backward_from_a_constant_gradient_raises(device):
    # d(x.grad)/dx: the path reaches the op only through its saved input. torch's own
    # decorator would let this through with a wrong answer (see the next test).
    x = _input((5,), device)
    (g,) = torch.autograd.grad(legendre_p3_numpy(x).sum(), x, create_graph=True)
    torch.testing.assert_close(g, 7.5 * x.detach() ** 2 - 1.5)  # first derivative still right
    with pytest.raises(RuntimeError, match=DOUBLE_BACKWARD):
        torch.autograd.grad(g.sum(), x)
    with pytest.raises(RuntimeError, match=DOUBLE_BACKWARD):
        g.sum().backward()
    with pytest.raises(RuntimeError, match=DOUBLE_BACKWARD):
        gradgradcheck(legendre_p3_numpy, (x,))


def test_double_backward_through_the_incoming_gradient_raises(device):
    x, v = _input((3, 2), device), _input((3, 2), device)
    (g,) = torch.autograd.grad(legendre_p3_numpy(x), x, v, create_graph=True)
    with pytest.raises(RuntimeError, match=DOUBLE_BACKWARD):
        torch.autograd.grad(g.sum(), v)


def test_torch_once_differentiable_alone_misses_the_saved_input_path():
    """Why the backward is a custom op without a derivative rather than a backward marked with
    torch's once_differentiable: that decorator ties its error to the incoming gradients only,
    so the d(x.grad)/dx above would neither raise clearly nor give the right answer."""

    class TorchDecorated(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x**3

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x**2

    x = _input((3,), "cpu")
    (g,) = torch.autograd.grad(TorchDecorated.apply(x).sum(), x, create_graph=True)
    assert not g.requires_grad  # the second derivative 6x is silently dropped


def test_no_graph_without_create_graph():
    x = _input((4,), "cpu")
    (g,) = torch.autograd.grad(legendre_p3_numpy(x).sum(), x)
    assert not g.requires_grad and g.grad_fn is None


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (torch.ones(3, dtype=torch.int64), TypeError, "legendre_p3_numpy: x must have a float"),
        ([1.0, 2.0], TypeError, "legendre_p3_numpy: x must be a torch.Tensor"),
    ],
    ids=["int64", "list"],
)
def test_bad_input_raises_clearly(x, error, match):
    with pytest.raises(error, match=match):
        legendre_p3_numpy(x)


def test_bad_impl_and_torch_func_raise_clearly():
    with pytest.raises(ValueError, match="legendre_p3_numpy: impl must be one of"):
        legendre_p3_numpy(torch.ones(2), impl="numpy")
    with pytest.raises(TypeError, match="legendre_p3_numpy: torch.func transforms"):
        torch.func.vmap(legendre_p3_numpy)(torch.ones(3, 2))
    with pytest.raises(TypeError, match="legendre_p3_numpy: torch.func transforms"):
        torch.func.grad(lambda t: legendre_p3_numpy(t).sum())(torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_custom_ops_pass_opcheck(dtype, device):
    x = torch.randn(3, 4, dtype=dtype, device=device)
    for requires_grad in (False, True):
        torch.library.opcheck(LegendreP3NumPy, (x.clone().requires_grad_(requires_grad),))
    torch.library.opcheck(legendre_p3_numpy_backward, (torch.randn_like(x), x))
    torch.library.opcheck(LegendreP3NumPy, (x.mT,))  # strided input, contiguous result


def test_compiles_to_one_graph_equal_to_eager():
    torch._dynamo.reset()
    x = _input((4, 6), "cpu", non_contiguous=True)
    # aot_eager: Dynamo and AOT autograd trace the op through its fake kernels like inductor
    # does, without inductor's C++ compile time; tests/models/test_compile.py runs inductor.
    compiled = torch.compile(legendre_p3_numpy, fullgraph=True, backend="aot_eager")
    out = compiled(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(out, legendre_p3_numpy(x), rtol=0, atol=0)
    (want,) = torch.autograd.grad(legendre_p3_numpy(x).sum(), x)
    torch.testing.assert_close(grad, want, rtol=0, atol=0)


def test_forward_mode_ad_raises_clearly():
    """A custom op without a jvp would silently drop a tangent: refused instead."""
    with fwAD.dual_level(), pytest.raises(TypeError, match="legendre_p3_numpy: torch.func"):
        legendre_p3_numpy(fwAD.make_dual(torch.ones(3), torch.ones(3)))
    for transform in (torch.func.jacfwd, torch.func.jacrev):
        with pytest.raises(TypeError, match="legendre_p3_numpy: torch.func transforms"):
            transform(legendre_p3_numpy)(torch.ones(3))


class _NumPyP3(torch.autograd.Function):
    """legendre_p3_numpy as an autograd.Function whose backward is models.ops' decorator's."""

    @staticmethod
    def forward(x):
        return torch.from_numpy(legendre_p3_builtin(x.detach()).numpy())

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.from_numpy((grad * (7.5 * x * x - 1.5)).numpy())


def test_once_differentiable_decorator_raises_on_every_double_backward_path():
    """models.ops.once_differentiable also covers the saved-input path torch's misses."""
    message = "_NumPyP3Backward: this backward is once_differentiable"
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    gradcheck(_NumPyP3.apply, (x,))
    (g,) = torch.autograd.grad(_NumPyP3.apply(x).sum(), x, create_graph=True)
    torch.testing.assert_close(g, 7.5 * x.detach() ** 2 - 1.5)
    with pytest.raises(RuntimeError, match=message):
        g.sum().backward()
    v = torch.ones(5, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(_NumPyP3.apply(x), x, v, create_graph=True)
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.grad(g.sum(), v)
