"""P3 computed in NumPy: the library's example of a backward that autograd cannot see through.

Forward and backward are `torch.library` custom ops that leave torch for NumPy (on the CPU),
so torch.compile treats each as one opaque node and autograd records nothing inside them. The
backward op has no derivative: a double backward raises instead of silently seeing a
constant. `legendre_p3` is the double-differentiable version of the same op.

No `import numpy` here: the arrays come from `Tensor.numpy()` and go back by
`torch.as_tensor`, so NumPy (installed with matplotlib) is needed only when the op runs.
"""

# No `from __future__ import annotations`: custom_op reads the op's schema from the type hints.
import torch
import torch.autograd.forward_ad as fwAD

from .._checks import check_float_tensor, check_impl
from .._function import is_transform_wrapper
from ..legendre import legendre_p3_builtin

OP = "legendre_p3_numpy"
DOUBLE_BACKWARD_ERROR = (
    f"{OP} is once differentiable: its backward runs in NumPy, outside autograd, so it cannot "
    "be differentiated again; use legendre_p3 for a double backward"
)


def _to_numpy(t: torch.Tensor):  # -> numpy.ndarray
    # force=True: detach, move to the CPU and resolve conj/neg views, copying only if needed.
    # NumPy has no bfloat16: computed in float32, rounded back once (as accurate or more).
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy(force=True)


def _from_numpy(a, like: torch.Tensor) -> torch.Tensor:
    # as_tensor, not from_numpy: NumPy arithmetic on a 0-d array gives a NumPy scalar.
    # contiguous: NumPy may keep a strided input's layout; the op's fake returns contiguous.
    return torch.as_tensor(a).to(like.device, like.dtype).contiguous()


@torch.library.custom_op("curve_fitting_lab::legendre_p3_numpy", mutates_args=())
def LegendreP3NumPy(x: torch.Tensor) -> torch.Tensor:
    """P3(x) = x·(2.5x² − 1.5) in NumPy, as a torch.library custom op (once differentiable)."""
    xn = _to_numpy(x)
    out = xn * xn
    out *= 2.5
    out -= 1.5
    out *= xn  # x·(2.5x² − 1.5): the same roundings as legendre_p3's kernels
    return _from_numpy(out, x)


@torch.library.custom_op("curve_fitting_lab::legendre_p3_numpy_backward", mutates_args=())
def legendre_p3_numpy_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad · P3'(x) = grad · (7.5x² − 1.5) in NumPy: the backward of LegendreP3NumPy."""
    xn = _to_numpy(x)
    dp3 = xn * xn
    dp3 *= 7.5
    dp3 -= 1.5
    dp3 *= _to_numpy(grad)
    return _from_numpy(dp3, grad)


@LegendreP3NumPy.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape)


@legendre_p3_numpy_backward.register_fake
def _(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return grad.new_empty(x.shape)


def _setup_context(ctx, inputs, output) -> None:
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return legendre_p3_numpy_backward(grad, x)


def _refuse_double_backward(ctx, grad: torch.Tensor):
    # Registered so the error names the op and the fix; without it torch would say only that
    # the backward op has no autograd formula.
    raise RuntimeError(DOUBLE_BACKWARD_ERROR)


LegendreP3NumPy.register_autograd(_backward, setup_context=_setup_context)
legendre_p3_numpy_backward.register_autograd(_refuse_double_backward)


def legendre_p3_numpy(x: torch.Tensor, impl: str = "custom") -> torch.Tensor:
    """P3(x) elementwise through NumPy (once differentiable); impl='builtin' is the eager
    expression."""
    check_float_tensor(OP, "x", x)
    if impl != "custom":
        check_impl(OP, impl)
        return legendre_p3_builtin(x)
    # torch.compile sees the custom op as one node; eager transforms would reach NumPy with
    # wrappers (or drop a forward-mode tangent silently): refused, with the fix.
    if not torch.compiler.is_compiling() and (
        is_transform_wrapper(x) or fwAD.unpack_dual(x).tangent is not None
    ):
        raise TypeError(
            f"{OP}: torch.func transforms (vmap, grad, jacrev, jvp, ...) and forward-mode AD "
            "cannot see into NumPy; use legendre_p3, which supports them"
        )
    return LegendreP3NumPy(x)
