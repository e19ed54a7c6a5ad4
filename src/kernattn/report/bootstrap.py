"""Paired bootstrap over items: the interval of a statistic of two rows scored on the same items
(CORE: per-item correctness), resampling the items with replacement jointly for both rows (and
per task, stratified, for a mean over tasks); percentile interval."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from .verdicts.levels import LEVEL, POWER


@dataclass(frozen=True)
class BootCI:
    """Point estimate and percentile interval of a paired bootstrap."""

    estimate: float
    lo: float
    hi: float
    n_items: int
    resamples: int
    level: float = LEVEL

    def mde(self, power: float = POWER) -> float:
        """Minimum detectable effect at this interval's spread: the true difference a one-sided
        test at the interval's own level detects with probability `power`, the bootstrap
        distribution taken as normal, so its standard error = half-width / z_{(1+level)/2}:
        (z_{(1+level)/2} + z_power) x se."""
        z = float(_st.norm.ppf((1 + self.level) / 2))
        return (z + float(_st.norm.ppf(power))) * (self.hi - self.lo) / 2 / z


def paired_bootstrap(strata: Sequence[tuple[Sequence[float], Sequence[float]]],
                     statistic: Callable[[list[tuple[np.ndarray, np.ndarray]]], np.ndarray],
                     resamples: int = 2000, level: float = LEVEL, seed: int = 0) -> BootCI:
    """Percentile interval of `statistic` over item resamples, paired within each stratum.

    strata: per stratum (task), the two rows' per-item scores in the same item order.
    statistic: given per stratum (a, b) arrays of shape [R, n] (R resamples, the original
    data as R = 1), returns [R] values. Items are drawn with replacement, the same indices
    for both rows, independently per stratum.
    """
    rng = np.random.default_rng(seed)
    data = []
    for a, b in strata:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if a.shape != b.shape or a.ndim != 1 or a.size == 0:
            raise ValueError(f"paired item scores must be two non-empty vectors of one length: "
                             f"{a.shape} and {b.shape}")
        data.append((a, b))
    estimate = float(statistic([(a[None], b[None]) for a, b in data])[0])
    draws = []
    for a, b in data:
        idx = rng.integers(0, a.size, size=(resamples, a.size))
        draws.append((a[idx], b[idx]))
    values = np.asarray(statistic(draws), dtype=float)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return BootCI(estimate, float(lo), float(hi), sum(a.size for a, _ in data), resamples, level)


def centered_diff_statistic(baselines: Sequence[float]):
    """Statistic for paired_bootstrap: mean over strata of the centered-score difference
    (acc_a - b) / (1 - b) - (acc_b - b) / (1 - b) = (acc_a - acc_b) / (1 - b)."""
    def stat(strata):
        diffs = [(a.mean(axis=1) - b.mean(axis=1)) / (1 - base) for (a, b), base in zip(strata, baselines)]
        return np.mean(diffs, axis=0)
    return stat
