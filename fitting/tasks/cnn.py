"""cnn: a CNN regressing (a, b, c, d) from 32x32 images of noisy curves a + b·P3(c + d·x)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from fitting.tasks.shared import Batch, Task, require
from models.cnn import CurveCNN
from models.ops import legendre_p3_reference

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Ranges of (a, b, c, d). d > 0 and |b| >= 0.3 make the map (a, b, c, d) -> curve one-to-one:
# P3 is odd, so (a, -b, -c, -d) draws the same curve, and b = 0 leaves c and d undetermined.
LOW = torch.tensor([-0.5, 0.3, -0.2, 0.6], dtype=torch.float64)
HIGH = torch.tensor([0.5, 1.0, 0.2, 1.0], dtype=torch.float64)
MEAN = torch.tensor([0.0, 0.0, 0.0, 0.8], dtype=torch.float64)  # targets are (p - MEAN) / SCALE
SCALE = torch.tensor([0.5, 1.0, 0.2, 0.2], dtype=torch.float64)  # in about [-1, 1]
Y_SPAN = 3.0  # the image spans x in [-1, 1] (columns), y in [-Y_SPAN, Y_SPAN] (rows, top = +)
NAMES = ("a", "b", "c", "d")


def curve_rows(params: Tensor, size: int) -> Tensor:
    """The fractional row (0 at the top) of each curve at the `size` column centres, (n, size)."""
    x = torch.linspace(-1.0, 1.0, size, dtype=params.dtype)
    a, b, c, d = (params[:, i:i + 1] for i in range(4))
    y = a + b * legendre_p3_reference(c + d * x)
    return (Y_SPAN - y) / (2 * Y_SPAN) * (size - 1)


def make_images(n: int, size: int, noise: float, generator: torch.Generator) -> tuple[Tensor, ...]:
    """n curves' (a, b, c, d), drawn uniformly from the ranges (b of either sign), and their
    images (n, 1, size, size): soft lines (1 pixel std) plus Gaussian noise, all float64."""
    u = torch.rand(n, 4, generator=generator, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0).double()
    params = LOW + (HIGH - LOW) * u
    params[:, 1] *= sign
    grid = torch.arange(size, dtype=torch.float64).view(1, size, 1)
    images = torch.exp(-0.5 * (grid - curve_rows(params, size).unsqueeze(1)) ** 2)
    images = images + noise * torch.randn(images.shape, generator=generator, dtype=torch.float64)
    return params, images.unsqueeze(1)


class CNNTask(Task):
    """Minibatches of batch_size from n_train images; validation MSE on n_val held-out images.
    The loss is the MSE of the standardized (a, b, c, d)."""

    name, reduction, slots = "cnn", "mean", ("conv_bn", "activation", "linear")
    card = (20, ("task.n_train=640", "task.n_val=64"))  # data for 20 steps of 32, not 8192

    def __init__(self, *, n_train: int, n_val: int, batch_size: int, image_size: int,
                 noise: float, channels: list[int], hidden: int, ops: Mapping[str, Callable],
                 device: torch.device | str, dtype: torch.dtype, seed: int) -> None:
        blocks = 2 ** len(channels)
        require([("n_train", n_train, n_train >= 2, ">= 2"), ("n_val", n_val, n_val >= 1, ">= 1"),
                 ("batch_size", batch_size, 2 <= batch_size <= n_train,
                  f"in [2, task.n_train={n_train}] (batch norm needs 2 images)"),
                 ("noise", noise, noise >= 0, ">= 0 (the std of the pixel noise)"),
                 ("channels", list(channels), len(channels) > 0 and min(channels) >= 1,
                  "a non-empty list of sizes >= 1"),
                 ("image_size", image_size, image_size >= 1 and image_size % blocks == 0,
                  f"a positive multiple of 2**len(task.channels) = {blocks}"),
                 ("hidden", hidden, hidden >= 1, ">= 1")])
        # Made in float64 on the CPU: a seed gives the same data on every device and dtype.
        generator = torch.Generator().manual_seed(seed)
        params, images = make_images(n_train + n_val, image_size, noise, generator)
        images, targets = images.to(device, dtype), ((params - MEAN) / SCALE).to(device, dtype)
        self.train_set: Batch = (images[:n_train], targets[:n_train])
        self.val_set: Batch = (images[n_train:], targets[n_train:])
        self.val_params, self.batch_size, self.blocks = params[n_train:], batch_size, len(channels)
        # The minibatches continue the data's stream: replayed from here for any step asked.
        self.generator, self.start, self.next_step = generator, generator.get_state(), 0
        self.model = CurveCNN(image_size, list(channels), hidden, device=device, dtype=dtype, **ops)

    def batch(self, step: int) -> Batch:
        """Minibatch `step`: batch_size training images drawn with replacement, the same for a
        step in every run of this seed (a resumed run included)."""
        images, targets = self.train_set
        if step < self.next_step:
            self.generator.set_state(self.start)
            self.next_step = 0
        while self.next_step <= step:
            idx = torch.randint(len(images), (self.batch_size,), generator=self.generator)
            self.next_step += 1
        idx = idx.to(images.device)
        return images[idx], targets[idx]

    def predict(self, model: CurveCNN) -> Tensor:
        """The validation images' predictions, standardized, batch norm in eval mode."""
        training = model.training
        with torch.no_grad():
            pred = model.eval()(self.val_set[0])
        model.train(training)
        return pred

    def validate(self, model: CurveCNN) -> float:
        """MSE of the standardized parameters on the validation set."""
        return (self.predict(model) - self.val_set[1]).square().mean().item()

    def summary(self, model: CurveCNN) -> dict[str, float]:
        """Validation MSE (standardized) and each parameter's RMSE in its own units."""
        err = (self.predict(model) - self.val_set[1]).double().cpu() * SCALE
        rmse = err.square().mean(0).sqrt().tolist()
        return {"val_mse": self.validate(model),
                **{f"rmse_{n}": r for n, r in zip(NAMES, rmse, strict=True)}}

    def describe(self, model: CurveCNN) -> str:
        """Architecture in one line."""
        n_params = sum(p.numel() for p in model.parameters())
        return f"CurveCNN with {self.blocks} conv-BN blocks, {n_params} parameters"

    def figure(self, model: CurveCNN, step: int) -> Figure:
        """Four validation images with true and predicted curves; predicted vs true a, b, c, d."""
        from matplotlib.figure import Figure

        images, true = self.val_set[0][:4, 0].float().cpu(), self.val_params
        pred = self.predict(model).double().cpu() * SCALE + MEAN
        size = images.shape[-1]
        fig = Figure(figsize=(10.0, 5.2))
        axes = fig.subplots(2, 4)
        for ax, image, t, p in zip(axes[0], images, curve_rows(true[:4], size),
                                   curve_rows(pred[:4], size), strict=True):
            ax.imshow(image.numpy(), cmap="gray", vmin=-0.3, vmax=1.3)
            ax.plot(t.numpy(), "-", linewidth=1.2, label="true")
            ax.plot(p.numpy(), "--", linewidth=1.2, label="predicted")
            ax.set(xticks=[], yticks=[], ylim=(size - 0.5, -0.5))
        axes[0][0].legend(loc="lower left", fontsize=7)
        for j, ax in enumerate(axes[1]):
            ax.scatter(true[:, j].numpy(), pred[:, j].numpy(), s=4, alpha=0.5)
            lo, hi = float(true[:, j].min()), float(true[:, j].max())
            ax.plot([lo, hi], [lo, hi], color="0.5", linewidth=1)
            ax.set(xlabel=f"true {NAMES[j]}", ylabel=f"predicted {NAMES[j]}")
        fig.suptitle(f"step {step}: validation MSE {self.validate(model):.4g} "
                     "(standardized a, b, c, d)")
        fig.subplots_adjust(left=0.07, right=0.98, bottom=0.1, top=0.92, wspace=0.45, hspace=0.3)
        return fig
