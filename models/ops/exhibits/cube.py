"""x³ with exact double backward: the derivative 3x² is an extra output (the MyCube pattern)."""

import torch


class Cube(torch.autograd.Function):
    """Returns (x³, 3x²); backward uses the saved 3x² so autograd can differentiate it again."""

    @staticmethod
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x**3, 3 * x**2

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        # dx is an output, so in a double backward its gradient flows back through this
        # Function's graph again: that is what makes the second derivative exact.
        ctx.save_for_backward(inputs[0], output[1])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad_result: torch.Tensor | None, grad_dx: torch.Tensor | None):
        x, dx = ctx.saved_tensors
        grads = [g * d for g, d in ((grad_result, dx), (grad_dx, 6 * x)) if g is not None]
        return sum(grads) if grads else None


def cube(x: torch.Tensor) -> torch.Tensor:
    """x³ elementwise with exact higher derivatives; its twin is `x ** 3`."""
    return Cube.apply(x)[0]
