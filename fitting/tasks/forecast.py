"""forecast: a small transformer forecasts curves (sums of sines plus noise) binned into tokens;
next-token cross-entropy, minibatches; held-out forecasts decoded autoregressively."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from fitting.tasks.shared import Batch, Task, require
from models.forecast import Forecaster

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def make_curves(n: int, length: int, sines: int, noise: float, generator: torch.Generator
                ) -> tuple[Tensor, Tensor]:
    """n curves y(t) = Σ a·sin(2πt/period + phase), t = 0..length−1: (noisy, clean), float64.
    Each of the `sines` terms draws a in [0.2, 1]/√sines, period in [6, 40] steps, a phase."""
    def draw(low: float, high: float) -> Tensor:
        u = torch.rand(n, sines, 1, generator=generator, dtype=torch.float64)
        return low + (high - low) * u

    amp, period, phase = draw(0.2, 1.0) / math.sqrt(sines), draw(6.0, 40.0), draw(0, 2 * math.pi)
    t = torch.arange(length, dtype=torch.float64)
    clean = (amp * torch.sin(2 * math.pi * t / period + phase)).sum(1)
    return clean + noise * torch.randn(clean.shape, generator=generator, dtype=torch.float64), clean


class ForecastTask(Task):
    """Minibatches of batch_size windows (context + 1 values) from n_train curves, values in
    [−limit, limit] binned into `vocab` tokens; held out: n_val curves forecast `horizon` steps
    past their first `context` values, against the noiseless curve."""

    name, reduction = "forecast", "mean"
    residuals = None  # its loss is a cross-entropy (`loss`), not squared residuals
    slots = ("norm", "glu", "rope", "attention", "cross_entropy")
    # The card's trains-the-same: 40 steps of SGD at lr 0.3 on a small model (1 block of width
    # 16, vocabulary 256, context 16) and batches of 64, whose loss is steady enough from seed to
    # seed that a gradient a tenth of the right one differs (p ~ 0.01 with 3 seeds).
    card = (40, ("optimizer.lr=0.3", "task.vocab=256", "task.context=16", "task.horizon=4",
                 "task.width=16", "task.depth=1", "task.heads=2", "task.batch_size=64",
                 "task.n_train=1024", "task.n_val=16"))

    def __init__(self, *, n_train: int, n_val: int, batch_size: int, context: int, horizon: int,
                 vocab: int, limit: float, sines: int, noise: float, width: int, depth: int,
                 heads: int, ops: Mapping[str, Callable], device: torch.device | str,
                 dtype: torch.dtype, seed: int) -> None:
        least = (("n_train", n_train, 1), ("n_val", n_val, 1), ("batch_size", batch_size, 1),
                 ("context", context, 2), ("horizon", horizon, 1), ("vocab", vocab, 2),
                 ("sines", sines, 1), ("noise", noise, 0))
        require([*((key, v, v >= low, f">= {low}") for key, v, low in least),
                 ("limit", limit, math.isfinite(limit) and limit > 0, "finite and > 0"),
                 ("width", width, width >= 1 and width % (2 * heads) == 0,
                  f"a positive multiple of 2 * task.heads = {2 * heads}")])
        self.context, self.horizon, self.vocab, self.limit = context, horizon, vocab, limit
        self.batch_size, self.seed = batch_size, seed
        # Made in float64 on the CPU: a seed gives the same data on every device and dtype.
        generator = torch.Generator().manual_seed(seed)
        noisy, _ = make_curves(n_train, context + 1, sines, noise, generator)
        self.train_tokens = self.tokens(noisy).to(device)
        noisy, clean = make_curves(n_val, context + horizon, sines, noise, generator)
        self.val_tokens = self.tokens(noisy).to(device)
        self.val_past, self.val_future = noisy[:, :context], clean[:, context:]
        self.model = Forecaster(vocab, context, width, depth, heads, device=device, dtype=dtype,
                                **ops)

    def tokens(self, values: Tensor) -> Tensor:
        """Each value's bin: `vocab` equal bins over [−limit, limit], values outside clipped."""
        scaled = (values + self.limit) / (2 * self.limit) * self.vocab
        return scaled.floor().clamp(0, self.vocab - 1).long()

    def batch(self, step: int) -> Batch:
        """Minibatch `step`: batch_size training windows drawn with replacement from a generator
        seeded by (seed, step), so a step's batch is the same in every run (resumed too)."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        idx = torch.randint(len(self.train_tokens), (self.batch_size,), generator=generator)
        window = self.train_tokens[idx.to(self.train_tokens.device)]
        return window[:, :-1], window[:, 1:]

    @staticmethod
    def loss(model: Forecaster, batch: Batch) -> Tensor:
        """Mean next-token cross-entropy of the batch, through the model's cross_entropy op."""
        return model(*batch)

    def validate(self, model: Forecaster) -> float:
        """Next-token cross-entropy on the held-out curves (their first context + 1 values)."""
        window = self.val_tokens[:, :self.context + 1]
        with torch.no_grad():
            return model(window[:, :-1], window[:, 1:]).item()

    def forecast(self, model: Forecaster, n: int | None = None) -> Tensor:
        """The first n (all) held-out curves' next `horizon` values, each the mean of the
        predicted distribution over bins, fed back as its bin (float64, CPU)."""
        tokens, out = self.val_tokens[:n, :self.context], []
        centres = self.limit * ((2 * torch.arange(self.vocab, device=tokens.device) + 1) /
                                self.vocab - 1)  # each bin's, in the curve's units
        with torch.no_grad():
            for _ in range(self.horizon):
                probs = model.logits(tokens[:, -self.context:]).double().softmax(-1)
                out.append(probs @ centres.to(probs.dtype))
                tokens = torch.cat((tokens, self.tokens(out[-1])[:, None]), 1)
        return torch.stack(out, 1).cpu()

    def summary(self, model: Forecaster) -> dict[str, float]:
        """Held-out RMSE of the forecast and of the naive one (the last value repeated), their
        ratio, and the validation cross-entropy."""
        rmse = (self.forecast(model) - self.val_future).square().mean().sqrt().item()
        naive = (self.val_past[:, -1:] - self.val_future).square().mean().sqrt().item()
        return {"val_loss": self.validate(model), "forecast_rmse": rmse, "naive_rmse": naive,
                "forecast_vs_naive": rmse / naive}

    def describe(self, model: Forecaster) -> str:
        """Architecture in one line."""
        n_params = sum(p.numel() for p in model.parameters())
        return f"Forecaster, {len(model.blocks)} blocks, {n_params} parameters, vocab {self.vocab}"

    def figure(self, model: Forecaster, step: int) -> Figure:
        """Four held-out curves: the context, the truth, the forecast and the naive forecast."""
        from matplotlib.figure import Figure

        pred, past, future = self.forecast(model, 4), self.val_past[:4], self.val_future[:4]
        t_past, t_future = torch.arange(self.context), torch.arange(self.horizon) + self.context
        fig = Figure(figsize=(10.0, 5.2))
        for ax, p, f, y in zip(fig.subplots(2, 2).flat, past, future, pred, strict=True):
            ax.plot(t_past, p, color="0.6", linewidth=1, label="context (noisy)")
            ax.plot(t_future, f, color="0.3", linewidth=2, label="truth")
            ax.plot(t_future, y, "C0", label="forecast")
            ax.plot(t_future, p[-1].expand(self.horizon), "C1--", label="naive")
            ax.set(xlabel="t (steps)", ylabel="value")
            ax.grid(alpha=0.3)
        fig.axes[0].legend(loc="lower left", fontsize=7)
        fig.suptitle(f"step {step}: held-out forecasts, {self.horizon} steps ahead")
        fig.tight_layout()
        return fig
