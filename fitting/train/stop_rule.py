"""When a run has converged: the loss stopped changing beyond rounding for `patience` steps."""

from __future__ import annotations

import torch


class StopRule:
    """Converged when `patience` consecutive steps changed the loss by at most `rtol`·|loss|
    (`rtol` None: 4 eps of `dtype`, a change within rounding). patience=0: never."""

    def __init__(self, patience: int, rtol: float | None, dtype: torch.dtype) -> None:
        self.patience = patience
        self.rtol = 4 * torch.finfo(dtype).eps if rtol is None else rtol
        self.quiet = 0  # consecutive steps without a change beyond rtol
        self.previous: float | None = None

    @property
    def enabled(self) -> bool:
        return self.patience > 0

    @property
    def close(self) -> bool:
        """One more quiet step would stop the run (the loop then keeps that step's parameters
        for logging)."""
        return self.enabled and self.quiet >= self.patience - 1

    def update(self, loss: float) -> bool:
        """Feed the loss at the start of a step; True when the steps so far have converged."""
        if self.previous is not None:
            change = abs(self.previous - loss)
            quiet = change <= self.rtol * abs(self.previous)
            self.quiet = self.quiet + 1 if quiet else 0
        self.previous = loss
        return self.enabled and self.quiet >= self.patience
