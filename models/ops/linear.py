"""y = x Wᵀ + b over any leading batch dims, as a custom autograd op."""

import torch

from ._function import compilable


class LinearFn(torch.autograd.Function):
    """Linear map that saves only what the requested gradients need."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() == 2 and bias is not None:
            return torch.addmm(bias, x, weight.t())
        out = x.matmul(weight.t())
        return out if bias is None else out.add_(bias)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, weight, bias = inputs
        # grad_x needs only W and grad_W needs only x: keep nothing the backward won't read.
        needs_x, needs_w = ctx.needs_input_grad[:2]
        ctx.save_for_backward(x if needs_w else None, weight if needs_x else None)
        ctx.save_for_forward(x, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        needs_x, needs_w, needs_b = ctx.needs_input_grad
        grad_x = grad.matmul(weight) if needs_x else None
        grad_rows = grad.reshape(-1, grad.shape[-1])
        grad_w = grad_rows.t().mm(x.reshape(-1, x.shape[-1])) if needs_w else None
        grad_b = grad_rows.sum(0) if ctx.has_bias and needs_b else None
        return grad_x, grad_w, grad_b

    @staticmethod
    def jvp(ctx, x_t, weight_t, bias_t):
        x, weight = ctx.saved_tensors
        out_t = torch.zeros((*x.shape[:-1], weight.shape[0]), dtype=x.dtype, device=x.device)
        if x_t is not None:
            out_t = out_t + x_t.matmul(weight.t())
        if weight_t is not None:
            out_t = out_t + x.matmul(weight_t.t())
        return out_t if bias_t is None else out_t + bias_t


_apply = compilable(LinearFn)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T + bias over any leading dims, like F.linear (its twin), through LinearFn."""
    return _apply(x, weight, bias)
