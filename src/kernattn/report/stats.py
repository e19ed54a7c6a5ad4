"""Statistics of the report: mean and 95% interval over seeds, and the verdict on a claim.

Mean over seeds: the Student t interval, mean +- t_{(1+level)/2, n-1} * s / sqrt(n), with s
the sample standard deviation (ddof=1). Undefined for one seed (half-width None).

Difference of two rows' means (a - b): Welch's interval, which does not assume equal
variances: se = sqrt(s_a^2/n_a + s_b^2/n_b), Welch-Satterthwaite degrees of freedom
df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1)), half-width t_{(1+level)/2, df} * se.
Needs at least two seeds in each row. If both rows have zero spread the interval is the
point difference itself (se = 0).

Verdicts (lower is better: the metric is a loss):
- "a < b" (a is better): reproduced if the whole interval of a - b lies below 0,
  contradicted if it lies above 0, inconclusive if it contains 0.
- "a ~ b" (a works as well as b): an equivalence test with a margin delta = margin_rel x
  the mean of the two rows' means (default 1%). Reproduced if the interval of a - b lies
  inside [-delta, +delta] (the difference is surely smaller than the margin: the 95%
  two-sided interval makes this a conservative two-one-sided-tests at 2.5% each side);
  contradicted if it lies entirely outside (|a - b| surely larger than the margin);
  inconclusive otherwise. A statistically detectable but negligible difference still counts
  as "as well as": the claim is about practical, not exact, equality.
- Fewer than two seeds in either row: "inconclusive (1 seed)" (no interval exists).
- A claim made of several comparisons (an ordering: its adjacent pairs) is contradicted if
  any comparison is, not run if a row it needs was not trained at this scale, reproduced
  if all comparisons are, and otherwise inconclusive (with "(1 seed)" when that is why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from scipy import stats as _st

LEVEL = 0.95
DEFAULT_MARGIN_REL = 0.01

REPRODUCED = "reproduced"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
ONE_SEED = "inconclusive (1 seed)"
NOT_RUN = "not run"
VERDICTS = (REPRODUCED, CONTRADICTED, INCONCLUSIVE, ONE_SEED, NOT_RUN)


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
    """Welch interval of mean(a) - mean(b)."""

    diff: float
    se: float
    df: float
    half: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Comparison:
    """One comparison of a claim: a `relation` b, our interval and the verdict."""

    a: str
    relation: str  # "<" or "~"
    b: str
    verdict: str
    ci: DiffCI | None = None
    margin: float | None = None
    note: str = ""


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


def welch_diff_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> DiffCI | None:
    """Welch interval of mean(a) - mean(b); None when either sample has fewer than 2 values."""
    a, b = _clean(a), _clean(b)
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    ma, mb = sum(a) / na, sum(b) / nb
    qa, qb = _var(a, ma) / na, _var(b, mb) / nb
    diff = ma - mb
    se = math.sqrt(qa + qb)
    if se == 0.0:
        return DiffCI(diff, 0.0, math.inf, 0.0, diff, diff)
    df = (qa + qb) ** 2 / (qa**2 / (na - 1) + qb**2 / (nb - 1))
    half = float(_st.t.ppf((1 + level) / 2, df)) * se
    return DiffCI(diff, se, df, half, diff - half, diff + half)


def compare_less(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float],
                 level: float = LEVEL) -> Comparison:
    """Claim "a < b" (a has the lower loss)."""
    ci = welch_diff_ci(a, b, level)
    if ci is None:
        return Comparison(name_a, "<", name_b, ONE_SEED)
    if ci.hi < 0:
        verdict = REPRODUCED
    elif ci.lo > 0:
        verdict = CONTRADICTED
    else:
        verdict = INCONCLUSIVE
    return Comparison(name_a, "<", name_b, verdict, ci)


def compare_equiv(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float],
                  margin_rel: float = DEFAULT_MARGIN_REL, level: float = LEVEL) -> Comparison:
    """Claim "a ~ b" (as good as), with margin delta = margin_rel x mean of the two means."""
    a_vals, b_vals = _clean(a), _clean(b)
    margin = margin_rel * abs(sum(a_vals) / len(a_vals) + sum(b_vals) / len(b_vals)) / 2
    ci = welch_diff_ci(a_vals, b_vals, level)
    if ci is None:
        return Comparison(name_a, "~", name_b, ONE_SEED, margin=margin)
    if -margin <= ci.lo and ci.hi <= margin:
        verdict = REPRODUCED
    elif ci.lo > margin or ci.hi < -margin:
        verdict = CONTRADICTED
    else:
        verdict = INCONCLUSIVE
    return Comparison(name_a, "~", name_b, verdict, ci, margin=margin)


def combine(verdicts: Sequence[str]) -> str:
    """One verdict for a claim made of several comparisons (see the module docstring)."""
    verdicts = list(verdicts)
    if not verdicts:
        return NOT_RUN
    for v in verdicts:
        if v not in VERDICTS:
            raise ValueError(f"unknown verdict {v!r}")
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if NOT_RUN in verdicts:
        return NOT_RUN
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    if ONE_SEED in verdicts:
        return ONE_SEED
    return INCONCLUSIVE


def ordering_pairs(order: Sequence) -> list[tuple[str, str]]:
    """Adjacent pairs (better, worse) of an ordering, best first.

    An element may be a list of rows the claim does not order among themselves (a tie
    group): every row of one element is claimed better than every row of the next.
    ["a", "b", ["c", "d"]] -> [(a, b), (b, c), (b, d)].
    """
    groups = [list(g) if isinstance(g, (list, tuple)) else [g] for g in order]
    if len(groups) < 2:
        raise ValueError(f"an ordering needs at least two elements: {order!r}")
    return [(x, y) for left, right in zip(groups, groups[1:]) for x in left for y in right]
