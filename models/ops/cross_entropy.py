"""The output projection and cross-entropy fused over chunks of tokens (Liger-Kernel's fused
linear cross-entropy): the (tokens × vocabulary) logits are never held whole, nor their gradient."""

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


class LinearCrossEntropyFn(torch.autograd.Function):
    """mean_i CE(x_i Wᵀ, target_i), `chunk` tokens at a time. The loss is a scalar and its
    gradient a scale, so forward takes each chunk's gradients w.r.t. x and W while its logits
    exist and saves those two (tokens × d and vocabulary × d); backward only scales them."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                chunk: int) -> torch.Tensor:
        needs_x, needs_w = ctx.needs_input_grad[:2]
        n = target.numel()
        grad_x = torch.empty_like(x) if needs_x else None
        grad_w = torch.zeros_like(weight) if needs_w else None
        loss = x.new_zeros(())
        for start in range(0, n, chunk):
            rows, t = x[start:start + chunk], target[start:start + chunk]
            logits = rows @ weight.t()
            lse = logits.logsumexp(-1)
            loss += (lse - logits.gather(1, t[:, None]).squeeze(1)).sum()
            if needs_x or needs_w:
                # d loss / d logits = (softmax − one-hot) / n, made in the logits' own buffer.
                grad_logits = logits.sub_(lse[:, None]).exp_()
                grad_logits[torch.arange(len(t), device=t.device), t] -= 1
                grad_logits /= n
                if needs_x:
                    grad_x[start:start + chunk] = grad_logits @ weight
                if needs_w:
                    grad_w.addmm_(grad_logits.t(), rows)
        ctx.save_for_backward(grad_x, grad_w)
        return loss / n

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        grad_x, grad_w = ctx.saved_tensors
        return (None if grad_x is None else grad_x * grad,
                None if grad_w is None else grad_w * grad, None, None)


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                         chunk: int = 256) -> torch.Tensor:
    """Mean cross-entropy of the logits x Wᵀ (x: tokens × d) against target (tokens,), fused."""
    return LinearCrossEntropyFn.apply(x, weight, target, chunk)


def linear_cross_entropy_reference(x: torch.Tensor, weight: torch.Tensor,
                                   target: torch.Tensor) -> torch.Tensor:
    """F.cross_entropy(F.linear(x, weight), target): linear_cross_entropy's twin."""
    return F.cross_entropy(F.linear(x, weight), target)
