"""Trains the same? An op's runs over seeds against its reference's, by one stated rule (the op
card's trains-the-same row uses it too). A minimal copy of the compare branch's trains_same: the
lead keeps that one."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05
RULE = ("identical: each seed's loss/train equals the reference's of the same seed at every step "
        "both logged; else Welch's two-sided t-test on the logs of the final losses over seeds: "
        f"p >= {ALPHA} the same within the seed spread, p < {ALPHA} differs. Under 2 seeds a "
        "side: no spread to judge. A final loss that is not finite (a diverged run): differs.")


def _spread(x: np.ndarray) -> str:
    return (f"{np.median(x):.4g} ({x.min():.4g}–{x.max():.4g}, n={len(x)})" if len(x) > 1 else
            f"{x[0]:.4g} (n=1)" if len(x) else "none")


def trains_same(mine: Sequence[float], ref: Sequence[float], identical: bool) -> tuple[str, str]:
    """RULE on the final losses of mine and the reference over seeds: 'identical', 'same',
    'differs' or 'too few seeds', and in words with each side's median (min–max), their ratio, p."""
    a, b = (np.asarray(x, dtype=np.float64) for x in (mine, ref))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy: one side without spread
        la, lb, few = np.log(a), np.log(b), min(len(a), len(b)) < 2
        finite, p = np.isfinite(la).all() and np.isfinite(lb).all(), math.nan
        if finite and not few:
            from scipy.stats import ttest_ind  # no spread at all: Welch's t is 0/0 or x/0

            p = float(la[0] == lb[0]) if np.ptp(la) == np.ptp(lb) == 0 else float(
                ttest_ind(la, lb, equal_var=False).pvalue)
        ratio = np.median(a) / np.median(b) if len(a) and len(b) else math.nan
    text = (f"final loss median {_spread(a)} vs the reference's {_spread(b)}; ratio of medians "
            f"{ratio:.4g}; Welch p={'n/a' if math.isnan(p) else format(p, '.2g')}")
    if not finite:  # even where the curves agree at every step the reference logged
        return "differs", f"differs: a final loss is not finite (a diverged run); {text}"
    if identical:
        return "identical", f"identical: every seed's curve is the reference's; {text}"
    if few:
        return "too few seeds", f"no spread to judge (sweep seed=0,1,2,3,4); {text}"
    return ("same", f"the same within the seed spread; {text}") if p >= ALPHA else (
        "differs", f"differs (p < {ALPHA}); {text}")
