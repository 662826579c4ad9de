"""cnn: a CNN of FusedConvBN2d blocks regressing (a, b, c, d) from images of a + b·P3(c + d·x)."""

from __future__ import annotations

from typing import Any

import torch

from fitting.tasks.data import (
    curve_values,
    param_scale,
    rasterize_curves,
    sample_curve_params,
    y_to_row,
)
from fitting.track.figures import FigureSpec
from models.cnn import CurveCNN

Batch = tuple[torch.Tensor, torch.Tensor]
PARAM_NAMES = ("a", "b", "c", "d")


def residuals(model: CurveCNN, batch: Batch) -> torch.Tensor:
    """Predicted minus true standardized parameters, shape (n, 4); the loss is their mean square."""
    images, targets = batch
    return model(images) - targets


class CNNTask:
    """Minibatch regression on n_train images; validation MSE on n_val held-out images."""

    name = "cnn"
    reduction = "mean"
    has_validation = True
    full_batch = False
    residuals = staticmethod(residuals)

    def __init__(
        self,
        cfg: Any,
        ops: dict,
        device: torch.device,
        dtype: torch.dtype,
        generator: torch.Generator,
    ) -> None:
        n = cfg.n_train + cfg.n_val
        # Made in float64 on the CPU so a seed gives the same data on every device and dtype.
        params = sample_curve_params(n, generator)
        images = rasterize_curves(params, cfg.image_size, cfg.noise, generator)
        self.mean, self.scale = param_scale()
        targets = (params - self.mean) / self.scale
        images, targets = images.to(device, dtype), targets.to(device, dtype)
        self.train_set: Batch = (images[: cfg.n_train], targets[: cfg.n_train])
        self.val_set: Batch = (images[cfg.n_train :], targets[cfg.n_train :])
        self.val_params = params[cfg.n_train :]
        self.batch_size = cfg.batch_size
        self.image_size = cfg.image_size
        self.generator = generator  # continues after the data: the same minibatches every run
        self.model = CurveCNN(cfg.image_size, list(cfg.channels), device=device, dtype=dtype,
                              **ops)

    def batch(self, step: int) -> Batch:
        """A random minibatch (with replacement across steps) of the training images."""
        images, targets = self.train_set
        idx = torch.randint(len(images), (self.batch_size,), generator=self.generator)
        idx = idx.to(images.device)
        return images[idx], targets[idx]

    def validate(self, model: CurveCNN) -> float:
        """MSE of the standardized parameters on the validation set (batch norm in eval mode)."""
        return self._val_residuals(model).pow(2).mean().item()

    def summary(self, model: CurveCNN) -> dict[str, float]:
        """Validation MSE (standardized) and the RMSE of each parameter in its own units."""
        err = self._val_residuals(model).double().cpu() * self.scale
        rmse = err.pow(2).mean(0).sqrt().tolist()
        out = {"val_mse": self.validate(model)}
        out.update({f"rmse_{name}": r for name, r in zip(PARAM_NAMES, rmse, strict=True)})
        return out

    def describe(self, model: CurveCNN) -> str:
        """Architecture in one line."""
        # One conv per conv-BN block, whichever function (ops.conv_bn) runs the block.
        blocks = sum(1 for m in model.features.modules() if isinstance(m, torch.nn.Conv2d))
        n_params = sum(p.numel() for p in model.parameters())
        return f"CurveCNN with {blocks} conv-BN blocks, {n_params} parameters"

    def predicted_params(self, model: CurveCNN, images: torch.Tensor) -> torch.Tensor:
        """(a, b, c, d) predicted for `images` in their own units, float64 on the CPU."""
        training = model.training
        model.eval()
        try:
            with torch.no_grad():
                pred = model(images)
        finally:
            model.train(training)
        return pred.double().cpu() * self.scale + self.mean

    def figure(self, model: CurveCNN, step: int) -> FigureSpec:
        """Four validation images with their true and predicted curves, and predicted vs true
        (a, b, c, d) over the validation set."""
        images, _ = self.val_set
        pred = self.predicted_params(model, images)
        true = self.val_params
        shown = 4

        def rows(params: torch.Tensor) -> Any:
            return y_to_row(curve_values(params[:shown], self.image_size), self.image_size).numpy()

        val = self.validate(model)
        return FigureSpec("curve_images", {
            "images": images[:shown, 0].float().cpu().numpy(),
            "cols": torch.arange(self.image_size).numpy(),
            "true_rows": rows(true), "pred_rows": rows(pred),
            "true": true.numpy(), "pred": pred.numpy(), "names": PARAM_NAMES,
            "title": f"step {step}: validation MSE {val:.4g} (standardized a, b, c, d)",
        })

    def _val_residuals(self, model: CurveCNN) -> torch.Tensor:
        """Residuals on the whole validation set, batch norm in eval mode, no graph."""
        images, targets = self.val_set
        training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return residuals(model, (images, targets))
        finally:
            model.train(training)
