"""Rotary position embedding (RoPE): each pair (x_i, x_{i+d/2}) turned by its position's angle."""

import torch


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) → (−x2, x1) on the halves of the last dim: a quarter turn of each pair."""
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


class RoPEFn(torch.autograd.Function):
    """x·cos + rotate_half(x)·sin. A rotation's gradient is the inverse rotation, so backward
    needs only cos and sin (x only if they want gradients); nothing is written to them."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        tables_grad = any(ctx.needs_input_grad[1:])
        ctx.save_for_backward(x if tables_grad else None, cos, sin)
        return x * cos + rotate_half(x) * sin

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, cos, sin = ctx.saved_tensors
        # rotate_half transposed is −rotate_half.
        grad_x = grad * cos - rotate_half(grad * sin)
        needs_cos, needs_sin = ctx.needs_input_grad[1:]
        grad_cos = (grad * x).sum_to_size(cos.shape) if needs_cos else None
        grad_sin = (grad * rotate_half(x)).sum_to_size(sin.shape) if needs_sin else None
        return grad_x, grad_cos, grad_sin


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (…, T, d) rotated by the angles whose cos and sin (T, d) are given, through RoPEFn."""
    return RoPEFn.apply(x, cos, sin)


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The formula in plain torch, differentiated by autograd: rope's twin."""
    return x * cos + rotate_half(x) * sin


def rope_tables(positions: int, dim: int, base: float = 10000.0) -> tuple[torch.Tensor, ...]:
    """cos and sin (positions, dim) of angle p·base^(−2i/dim) for pair i, in float64."""
    freqs = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = (torch.arange(positions, dtype=torch.float64)[:, None] * freqs).repeat(1, 2)
    return angles.cos(), angles.sin()
