"""A small decoder-only transformer over binned values (Llama's block: RMSNorm, RoPE, causal
attention, SwiGLU), whose five transformer ops are the given functions."""

import math

import torch
from torch import nn

from .layers import Op, RMSNorm
from .ops import attention as _attention
from .ops import linear_cross_entropy, rope_tables, swiglu
from .ops import rms_norm as _rms_norm
from .ops import rope as _rope


class Attention(nn.Module):
    """Causal self-attention: q, k, v by one projection, `rope` on q and k, then `attention`."""

    def __init__(self, width: int, heads: int, *, rope: Op, attention: Op, **factory) -> None:
        super().__init__()
        self.heads, self.rope, self.attention = heads, rope, attention
        self.qkv = nn.Linear(width, 3 * width, bias=False, **factory)
        self.out = nn.Linear(width, width, bias=False, **factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """(B, T, width) → (B, T, width)."""
        b, t, width = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = self.attention(self.rope(q, cos, sin), self.rope(k, cos, sin), v)
        return self.out(y.transpose(1, 2).reshape(b, t, width))


class Block(nn.Module):
    """x + attention(norm(x)), then x + down(glu(a, b)) with (a, b) = up(norm(x)) split in two:
    a pre-norm transformer block with a SwiGLU MLP of 4·width."""

    def __init__(self, width: int, heads: int, *, norm: Op, glu: Op, rope: Op, attention: Op,
                 **factory) -> None:
        super().__init__()
        self.norm1, self.norm2 = (RMSNorm(width, op=norm, **factory) for _ in range(2))
        self.attn = Attention(width, heads, rope=rope, attention=attention, **factory)
        self.glu = glu
        self.up = nn.Linear(width, 8 * width, bias=False, **factory)
        self.down = nn.Linear(4 * width, width, bias=False, **factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """(B, T, width) → (B, T, width)."""
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.down(self.glu(*self.up(self.norm2(x)).chunk(2, -1)))


class Forecaster(nn.Module):
    """Token embedding → `depth` blocks → norm → logits over `vocab` by the embedding (tied).
    The embedding starts as sinusoids of the token's index, of periods 16 to 2·vocab bins:
    neighbouring bins (values) start alike, in and out."""

    def __init__(self, vocab: int = 4096, context: int = 64, width: int = 64, depth: int = 2,
                 heads: int = 4, *, norm: Op = _rms_norm, glu: Op = swiglu, rope: Op = _rope,
                 attention: Op = _attention, cross_entropy: Op = linear_cross_entropy,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None
                 ) -> None:
        super().__init__()
        if width % (2 * heads):
            raise ValueError(f"Forecaster: width={width} must be a multiple of 2·heads={2 * heads}")
        factory = {"device": device, "dtype": dtype}
        self.context, self.cross_entropy = context, cross_entropy
        self.embed = nn.Embedding(vocab, width, **factory)
        with torch.no_grad():
            periods = torch.logspace(math.log10(16), math.log10(2 * vocab), width // 2,
                                     dtype=torch.float64)
            angles = torch.arange(vocab, dtype=torch.float64)[:, None] * (2 * math.pi / periods)
            rows = torch.cat((angles.cos(), angles.sin()), -1) / math.sqrt(width // 2)
            self.embed.weight.copy_(rows)  # of norm 1: the first logits are at most ~√width
        self.blocks = nn.ModuleList(Block(width, heads, norm=norm, glu=glu, rope=rope,
                                          attention=attention, **factory) for _ in range(depth))
        self.norm = RMSNorm(width, op=norm, **factory)
        for name, table in zip(("cos", "sin"), rope_tables(context, width // heads), strict=True):
            self.register_buffer(name, table.to(device, dtype or torch.get_default_dtype()), False)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T ≤ context) → the last norm's output (B, T, width)."""
        x, t = self.embed(ids), ids.shape[-1]
        for block in self.blocks:
            x = block(x, self.cos[:t], self.sin[:t])
        return self.norm(x)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of ids (B, T) against targets (B, T), by the slot."""
        h = self.hidden(ids)
        return self.cross_entropy(h.flatten(0, 1), self.embed.weight, targets.flatten())

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The logits (B, vocab) of the token after the last, for decoding."""
        return self.hidden(ids)[:, -1] @ self.embed.weight.t()
