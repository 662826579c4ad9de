"""ConfigError and the range checks every option's spec uses (no torch: a config error answers
before torch is imported)."""

from __future__ import annotations

import math


class ConfigError(ValueError):
    """A config value out of its allowed range; the message names key, value and what is allowed.

    train.py prints it as one line (no traceback) and exits with status 2.
    """


class Checker:
    """Collects `<key> must be ..., got <value>` for each failed check; keys are given relative
    to `prefix` (e.g. "optimizer."), so a spec's checks name their keys as the user writes them."""

    def __init__(self, problems: list[str] | None = None, prefix: str = "") -> None:
        self.problems = [] if problems is None else problems
        self.prefix = prefix

    def under(self, node: str) -> Checker:
        """A checker for the keys of `node` (e.g. "task"), adding to the same problems."""
        return Checker(self.problems, f"{self.prefix}{node}.")

    def key(self, name: str) -> str:
        """The full key of `name`, as the user writes it on the command line."""
        return self.prefix + name

    def problem(self, message: str) -> None:
        """Record a problem that the helpers below cannot phrase."""
        self.problems.append(message)

    def at_least(self, name: str, got: float, low: float, note: str = "") -> None:
        """`got` >= `low` (a float bound also asks for a finite value)."""
        # `not got >= low` also catches nan.
        if not got >= low or (isinstance(got, float) and not math.isfinite(got)):
            note = f" {note}" if note else ""
            self.problem(f"{self.key(name)} must be >= {low:g}{note}, got {got}")

    def positive(self, name: str, got: float) -> None:
        """`got` > 0 and finite."""
        if not (got > 0 and math.isfinite(got)):
            self.problem(f"{self.key(name)} must be > 0 (and finite), got {got}")

    def finite_range(self, low_name: str, low: float, high_name: str, high: float) -> None:
        """Finite `low` < `high`."""
        if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
            lo, hi = self.key(low_name), self.key(high_name)
            self.problem(
                f"{lo} and {hi} must be finite with {lo} < {hi}, "
                f"got {low_name}={low}, {high_name}={high}"
            )

    def raise_if_any(self) -> None:
        """Raise ConfigError listing every problem, if there is one."""
        if self.problems:
            raise ConfigError("; ".join(self.problems))
