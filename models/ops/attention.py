"""Causal softmax attention that saves O(T) per row (its log-sum-exp), not the T×T probabilities."""

import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def _scores(q: torch.Tensor, k: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """q kᵀ/√d of query rows start..stop against keys 0..stop, the future masked to −inf."""
    scores = q[..., start:stop, :] @ k[..., :stop, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = torch.ones(stop - start, stop, dtype=torch.bool, device=q.device).triu(start + 1)
    return scores.masked_fill_(future, -math.inf)


class AttentionFn(torch.autograd.Function):
    """softmax(q kᵀ/√d, causal) v, `block` query rows at a time, so that no more than
    block × T scores exist at once. Saves q, k, v and each row's log-sum-exp; backward
    recomputes the probabilities from them, block by block (FlashAttention's recipe)."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int) -> torch.Tensor:
        out, lse = torch.empty_like(q), q.new_empty(q.shape[:-1])
        for start in range(0, q.shape[-2], block):
            stop = min(start + block, q.shape[-2])
            scores = _scores(q, k, start, stop)
            lse[..., start:stop] = scores.logsumexp(-1)
            probs = scores.sub_(lse[..., start:stop, None]).exp_()
            out[..., start:stop, :] = probs @ v[..., :stop, :]
        ctx.save_for_backward(q, k, v, lse)
        ctx.block = block
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        q, k, v, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        scale = 1 / math.sqrt(q.shape[-1])
        for start in range(0, q.shape[-2], ctx.block):
            stop = min(start + ctx.block, q.shape[-2])
            probs = _scores(q, k, start, stop).sub_(lse[..., start:stop, None]).exp_()
            g = grad[..., start:stop, :]
            grad_v[..., :stop, :] += probs.transpose(-2, -1) @ g
            grad_probs = g @ v[..., :stop, :].transpose(-2, -1)
            # softmax backward: p·(dp − Σ p·dp); Σ_j p·dp = dout·out, so out need not be saved.
            grad_scores = probs * (grad_probs - (probs * grad_probs).sum(-1, keepdim=True))
            grad_q[..., start:stop, :] = grad_scores @ k[..., :stop, :] * scale
            grad_k[..., :stop, :] += grad_scores.transpose(-2, -1) @ q[..., start:stop, :] * scale
        return grad_q, grad_k, grad_v, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Causal attention of q, k, v (…, T, d) with scale 1/√d, through AttentionFn."""
    return AttentionFn.apply(q, k, v, block)


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """F.scaled_dot_product_attention(q, k, v, is_causal=True): attention's twin."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def attention_formula(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ/√d, causal) v as the textbook writes it: autograd keeps T×T probabilities."""
    return _scores(q, k, 0, q.shape[-2]).softmax(-1) @ v
