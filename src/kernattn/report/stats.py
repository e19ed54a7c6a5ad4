"""Statistics of the report: intervals over seeds and Holm's step-down procedure. No verdicts:
what a claim needs to pass is report/verdicts/ (its package docstring maps every rule).

Mean over seeds: the Student t interval, mean +- t_{(1+level)/2, n-1} * s / sqrt(n), with s
the sample standard deviation (ddof=1). Undefined for one seed (half-width None).

Difference of two rows' means (a - b), two designs:
- paired (`paired_diff_ci`): the rows were trained with the same seeds and the seed fixes the
  batch order (kernattn.tracks.char.track draws every row's batches from a generator seeded by the run's
  seed alone, and every run is scored on the same fixed validation windows), so seed s of row
  a and seed s of row b saw the same data in the same order. The interval is the one-sample
  t interval of the per-seed differences d_s = a_s - b_s (df = n - 1). Used whenever both rows
  have the same seeds.
- unpaired (`welch_diff_ci`): Welch's interval, se = sqrt(s_a^2/n_a + s_b^2/n_b),
  Welch-Satterthwaite df; for rows whose seeds differ.
Both need two seeds per row. With no spread the measurement can resolve (a standard error at
most max(ZERO_SPREAD x |difference|, RESOLUTION): every per-seed difference equal to within
float rounding, or to within the float32 rounding of an evaluated loss) the interval and the
p-value do not exist ("variance not estimable"), never p = 0, p = 1e-9 or a zero-width interval.

Multiple tests (`holm`, `holm_levels`): Holm's step-down procedure compares the smallest of k
p-values with alpha/k, the next with alpha/(k-1), ..., stopping at the first that is not below
its threshold; it controls the family-wise error at alpha for any dependence between the tests
and is uniformly more powerful than Bonferroni. `holm_levels` gives each test the two-sided
level its interval is read at (how the comparison rules use it: report.verdicts.comparisons).

Over readings some of which may be missing (`mean_of`, `mean_ci_of`: the tracks' and studies'
tables): None is left out; NaN or an infinity raises, unless the caller reads a blank table cell
as "not measured" (skip_nonfinite).

The paired bootstrap over items is report/bootstrap.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scipy import stats as _st

# the level and power are the verdict rules' (report.verdicts.levels): every interval is read there
from .verdicts.levels import ALPHA, LEVEL, ONE_SIDED_ALPHA, POWER


@dataclass(frozen=True)
class MeanCI:
    """Mean over seeds with its Student t interval (half, lo, hi None for one seed)."""

    n: int
    mean: float
    sd: float | None
    half: float | None
    lo: float | None
    hi: float | None


@dataclass(frozen=True)
class DiffCI:
    """Interval of mean(a) - mean(b): two-sided at `level`, with its t statistic's pieces.
    With se = 0 (zero spread) half, lo and hi are NaN: no interval exists."""

    diff: float
    se: float
    df: float
    half: float
    lo: float
    hi: float
    paired: bool = False
    n: int = 0                    # seeds of the smaller arm (pairs, when paired)

    @property
    def estimable(self) -> bool:
        return self.se > 0.0

    def p_two_sided(self, boundary: float = 0.0) -> float | None:
        """Two-sided p of mean difference = boundary (twice the smaller one-sided p); None
        when the variance is not estimable."""
        if not self.estimable:
            return None
        return float(2 * _st.t.sf(abs(self.diff - boundary) / self.se, self.df))

    def one_sided_bounds(self, level: float = 1 - ONE_SIDED_ALPHA) -> tuple[float, float]:
        """(lower, upper) one-sided `level` bounds of the difference (NaN when not estimable)."""
        if not self.estimable:
            return math.nan, math.nan
        q = float(_st.t.ppf(level, self.df)) * self.se
        return self.diff - q, self.diff + q

    def interval(self, level: float) -> tuple[float, float]:
        """The two-sided `level` interval of the difference (NaN when not estimable)."""
        return self.one_sided_bounds((1 + level) / 2)


def _clean(values: Sequence[float]) -> list[float]:
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values")
    if any(not math.isfinite(v) for v in vals):
        raise ValueError(f"non-finite value in {vals}")
    return vals


def _var(vals: list[float], mean: float) -> float:
    return sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)


def mean_ci(values: Sequence[float], level: float = LEVEL) -> MeanCI:
    """Mean and Student t interval over seeds."""
    vals = _clean(values)
    n = len(vals)
    mean = sum(vals) / n
    if n < 2:
        return MeanCI(n, mean, None, None, None, None)
    sd = math.sqrt(_var(vals, mean))
    half = float(_st.t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n)
    return MeanCI(n, mean, sd, half, mean - half, mean + half)


def _present(values: Iterable, skip_nonfinite: bool) -> list[float]:
    """The values that are not None (a reading that was not made), as floats; with skip_nonfinite
    also without NaN and infinities: a table's blank cell, read back from CSV as NaN. Otherwise a
    non-finite value stays, for _clean to raise on: a measurement that exists but is broken."""
    vals = [float(v) for v in values if v is not None]
    return [v for v in vals if math.isfinite(v)] if skip_nonfinite else vals


def mean_of(values: Iterable, skip_nonfinite: bool = False) -> float | None:
    """The mean of the values present (_present), None when there are none. Summed as mean_ci
    sums (left to right, not math.fsum), so that a table's mean column and the centre of an
    interval over the same values agree to the last bit."""
    vals = _present(values, skip_nonfinite)
    return mean_ci(vals).mean if vals else None


def mean_ci_of(values: Iterable, skip_nonfinite: bool = False, level: float = LEVEL) -> MeanCI | None:
    """mean_ci of the values present (_present), None when there are none."""
    vals = _present(values, skip_nonfinite)
    return mean_ci(vals, level) if vals else None


# A spread this small against the difference is float64 rounding (1.8 - 1.9 and 1.81 - 1.91
# differ in the 16th digit): zero, not a standard error of 1e-17 that would make any difference
# significant.
ZERO_SPREAD = 1e-12
# The absolute floor, in the metric's own unit: the finest difference a measurement resolves.
# The report's losses are means of per-token cross-entropies computed in float32 (from float32
# logits, bf16 ones under a GPU's autocast) and summed in float64 (tracks/char/data.py
# loss_sums). A float32 value of 1-3 nats is rounded to ~1e-7 nats (a 24-bit mantissa), and
# the matmuls before it round coarser still (TF32 / bf16 on a GPU), so scoring the same
# weights in another kernel order moves the mean by amounts of that order; 1e-6 nats, about
# ten float32 steps of a 1.5-nat loss, is the floor we take. A standard error below it
# measures the arithmetic, not the seeds; the purely relative 1e-12 let a spread of 1e-11 nats
# through and printed p ~ 1e-9. The other metrics compared (bits per byte, top-1 error in %
# over 1e4-5e4 images, sigma ratios near 1) resolve no finer, so one floor serves them all.
RESOLUTION = 1e-6


def _not_resolved(se: float, diff: float) -> bool:
    """Whether a standard error is below what the measurement resolves (module docstring)."""
    return se <= max(ZERO_SPREAD * abs(diff), RESOLUTION)


def _diff(diff: float, se: float, df: float, level: float, paired: bool, n: int) -> DiffCI:
    if _not_resolved(se, diff):
        return DiffCI(diff, 0.0, df, math.nan, math.nan, math.nan, paired, n)
    half = float(_st.t.ppf((1 + level) / 2, df)) * se
    return DiffCI(diff, se, df, half, diff - half, diff + half, paired, n)


def welch_diff_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> DiffCI | None:
    """Welch interval of mean(a) - mean(b); None when either sample has fewer than 2 values."""
    a, b = _clean(a), _clean(b)
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    ma, mb = sum(a) / na, sum(b) / nb
    qa, qb = _var(a, ma) / na, _var(b, mb) / nb
    se = math.sqrt(qa + qb)
    df = math.nan if _not_resolved(se, ma - mb) else (qa + qb) ** 2 / (qa**2 / (na - 1) + qb**2 / (nb - 1))
    return _diff(ma - mb, se, df, level, paired=False, n=min(na, nb))


def paired_diff_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> DiffCI | None:
    """t interval of the mean per-seed difference a_s - b_s (the values in seed order);
    None for fewer than two pairs."""
    a, b = _clean(a), _clean(b)
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    if len(a) < 2:
        return None
    d = [x - y for x, y in zip(a, b)]
    m = sum(d) / len(d)
    return _diff(m, math.sqrt(_var(d, m) / len(d)), len(d) - 1, level, paired=True, n=len(d))


def diff_ci(a, b, paired: bool, level: float = LEVEL) -> DiffCI | None:
    return paired_diff_ci(a, b, level) if paired else welch_diff_ci(a, b, level)


def mde(ci: DiffCI | None, family_size: int = 1, power: float = POWER) -> float | None:
    """Minimum detectable effect: the true |difference - boundary| a one-sided t test at
    ONE_SIDED_ALPHA / family_size detects with probability `power`, at this interval's
    standard error and degrees of freedom: (t_{1-alpha', df} + t_{power, df}) * se.
    None when the variance is not estimable."""
    if ci is None or not ci.estimable:
        return None
    a1 = ONE_SIDED_ALPHA / max(1, family_size)
    return float((_st.t.ppf(1 - a1, ci.df) + _st.t.ppf(power, ci.df)) * ci.se)


def holm(pvalues: Sequence[float], alpha: float = ALPHA) -> tuple[list[bool], list[float]]:
    """Holm's step-down procedure: (rejected, adjusted p-values), in the input order."""
    k = len(pvalues)
    order = sorted(range(k), key=lambda i: pvalues[i])
    rejected, adjusted = [False] * k, [1.0] * k
    running, stopped = 0.0, False
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * pvalues[i]))
        adjusted[i] = running
        stopped = stopped or pvalues[i] >= alpha / (k - rank)
        rejected[i] = not stopped
    return rejected, adjusted


def holm_levels(pvalues: Sequence[float], alpha: float = ALPHA) -> list[tuple[float, int, int | None]]:
    """Per test (input order), (alpha', step, stop): the two-sided alpha' its interval is read
    at, its Holm step (1 = smallest p) and the step Holm stopped at when that came before
    its own (else None). A test Holm reached gets its step's alpha / (k - step + 1); one after
    the stop gets the stopping step's, the level Strassburger & Bretz (2008, Statistics in
    Medicine 27: 4914-4927) give the hypotheses Holm retains. Either way the interval leaves
    out the boundary exactly when Holm rejects the test (its p is at least the stopping test's,
    which is not below that alpha'). Their compatible bounds for the rejected tests are the
    boundary itself unless all are rejected; we print each rejected test's step interval
    instead, which agrees with the verdict and shows the size, at the cost of simultaneous
    coverage (report.verdicts.comparisons' docstring)."""
    k = len(pvalues)
    order = sorted(range(k), key=lambda i: pvalues[i])   # stable: holm() breaks ties the same way
    out: list[tuple[float, int, int | None]] = [(alpha, 0, None)] * k
    stop = None
    for rank, i in enumerate(order):
        step = rank + 1
        if stop is None:
            out[i] = (alpha / (k - rank), step, None)
            if pvalues[i] >= alpha / (k - rank):
                stop = step
        else:
            out[i] = (alpha / (k - stop + 1), step, stop)
    return out
