"""P3 computed in NumPy: a backward autograd cannot see through, as torch.library custom ops.

Forward and backward leave torch for NumPy (on the CPU), so torch.compile treats each as one
opaque node and autograd records nothing inside them. The backward op has no derivative: a
double backward raises instead of silently seeing a constant, but forward-mode AD gets no
tangent (a custom op without a jvp). `legendre_p3` is the fully differentiable version.
"""

# No `from __future__ import annotations`: custom_op reads the op's schema from the type hints.
import torch


@torch.library.custom_op("curve_fitting_lab::legendre_p3_numpy", mutates_args=())
def legendre_p3_numpy(x: torch.Tensor) -> torch.Tensor:
    """P3(x) = x·(2.5x² − 1.5) elementwise in NumPy (once differentiable)."""
    xn = x.numpy(force=True)  # force: detach and move to the CPU
    return torch.as_tensor(xn * (2.5 * xn * xn - 1.5)).to(x.device, x.dtype)


@torch.library.custom_op("curve_fitting_lab::legendre_p3_numpy_backward", mutates_args=())
def legendre_p3_numpy_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad · P3'(x) = grad · (7.5x² − 1.5) in NumPy: the backward of legendre_p3_numpy."""
    xn = x.numpy(force=True)
    return torch.as_tensor(grad.numpy(force=True) * (7.5 * xn * xn - 1.5)).to(grad)


# Fake kernels: shapes and dtypes only, for torch.compile's tracing.
legendre_p3_numpy.register_fake(lambda x: torch.empty_like(x))
legendre_p3_numpy_backward.register_fake(lambda grad, x: torch.empty_like(grad))


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    return legendre_p3_numpy_backward(grad, ctx.saved_tensors[0])


def _refuse_double_backward(ctx, grad: torch.Tensor):
    # Without it torch would say only that the backward op has no autograd formula.
    raise RuntimeError("legendre_p3_numpy is once differentiable: its backward runs in NumPy; "
                       "use legendre_p3 for a double backward")


legendre_p3_numpy.register_autograd(_backward, setup_context=_setup_context)
legendre_p3_numpy_backward.register_autograd(_refuse_double_backward)
