"""Statistics of the report: intervals over seeds and items, and the verdict rules on a claim.

All verdict rules of the report live here; build.py, lm.py and the page only apply them.

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
Both need two seeds per row; with zero spread the interval is the point difference (se = 0).

Verdicts (lower is better: the metric is a loss). Each test is at alpha = 1 - level = 5%.
- "a < b" (`compare_less`): the two-sided test of mean(a) = mean(b); significant with
  diff < 0 -> reproduced, with diff > 0 -> contradicted, otherwise inconclusive. Alone, this
  is the 95% interval of a - b lying below 0, above 0, or containing 0.
- An ordering "a < b < c" (`compare_ordering`) is the family of its adjacent pairs' tests,
  corrected with Holm's step-down procedure: the smallest of k p-values is compared with
  alpha/k, the next with alpha/(k-1), ..., stopping at the first that is not below its
  threshold. Holm, because it controls the family-wise error (the chance that any pair of the
  ordering is wrongly called) at alpha for any dependence between the tests (the pairs share
  rows), and is uniformly more powerful than Bonferroni; the pairs are few, so the loss of
  power against an exact joint test is small. A pair whose test Holm rejects takes the
  direction of its difference; the claim is contradicted if any pair is, reproduced if all
  are, otherwise inconclusive.
- "a works as well as b" (`compare_noninferior`): a non-inferiority claim, tested one-sided
  with a margin delta (in the metric's units) fixed in paper_numbers.yaml before the runs.
  Reproduced if the one-sided upper (1 - alpha) bound of a - b lies below +delta (a is at
  most delta worse; a *better* than b passes); contradicted if the one-sided lower bound lies
  above +delta (a is surely worse by more than the margin); inconclusive otherwise.
  Being better than b is never a contradiction.
- Fewer than two seeds in either row: "inconclusive (1 seed)" (no interval exists).
- A row not trained at this scale: "not run".
- Facts that follow from the architecture, not from training (parameter counts): "holds by
  construction" when our count equals the paper's formula, "not comparable (architecture
  differs: ...)" when our model is built differently from the paper's by design.

Every verdict carries its scale (`at_scale`): at the paper scale it reads as is, below it
reads "at scale tiny: reproduced", and the page styles the two apart.

Paired bootstrap over items (`paired_bootstrap`): the interval of a statistic of two rows
scored on the same items (CORE: per-item correctness), resampling the items with replacement
jointly for both rows (and per task, stratified, for a mean over tasks); percentile interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats as _st

LEVEL = 0.95
ALPHA = 1 - LEVEL

REPRODUCED = "reproduced"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
ONE_SEED = "inconclusive (1 seed)"
NOT_RUN = "not run"
BY_CONSTRUCTION = "holds by construction"
NOT_COMPARABLE = "not comparable"
NOT_MEASURED = "not measured here"
VERDICTS = (REPRODUCED, CONTRADICTED, INCONCLUSIVE, ONE_SEED, NOT_RUN)
PAPER_SCALE = "paper"


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
    """Interval of mean(a) - mean(b): two-sided at `level`, with its t statistic's pieces."""

    diff: float
    se: float
    df: float
    half: float
    lo: float
    hi: float
    paired: bool = False

    def p_two_sided(self) -> float:
        if self.se == 0.0:
            return 0.0 if self.diff != 0 else 1.0
        return float(2 * _st.t.sf(abs(self.diff) / self.se, self.df))

    def one_sided_bounds(self, level: float = LEVEL) -> tuple[float, float]:
        """(lower, upper) one-sided `level` bounds of the difference."""
        q = 0.0 if self.se == 0.0 else float(_st.t.ppf(level, self.df)) * self.se
        return self.diff - q, self.diff + q


@dataclass(frozen=True)
class Comparison:
    """One comparison of a claim: a `relation` b, our interval and the verdict."""

    a: str
    relation: str  # "<" or "≲" (non-inferior)
    b: str
    verdict: str
    ci: DiffCI | None = None
    margin: float | None = None
    note: str = ""
    p: float | None = None        # two-sided p-value of the pair's test
    p_holm: float | None = None   # Holm-adjusted within its claim


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


def _diff(diff: float, se: float, df: float, level: float, paired: bool) -> DiffCI:
    if se == 0.0:
        return DiffCI(diff, 0.0, math.inf, 0.0, diff, diff, paired)
    half = float(_st.t.ppf((1 + level) / 2, df)) * se
    return DiffCI(diff, se, df, half, diff - half, diff + half, paired)


def welch_diff_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> DiffCI | None:
    """Welch interval of mean(a) - mean(b); None when either sample has fewer than 2 values."""
    a, b = _clean(a), _clean(b)
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    ma, mb = sum(a) / na, sum(b) / nb
    qa, qb = _var(a, ma) / na, _var(b, mb) / nb
    se = math.sqrt(qa + qb)
    df = math.inf if se == 0.0 else (qa + qb) ** 2 / (qa**2 / (na - 1) + qb**2 / (nb - 1))
    return _diff(ma - mb, se, df, level, paired=False)


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
    return _diff(m, math.sqrt(_var(d, m) / len(d)), len(d) - 1, level, paired=True)


def diff_ci(a, b, paired: bool, level: float = LEVEL) -> DiffCI | None:
    return paired_diff_ci(a, b, level) if paired else welch_diff_ci(a, b, level)


def _direction(ci: DiffCI, significant: bool) -> str:
    if not significant:
        return INCONCLUSIVE
    return REPRODUCED if ci.diff < 0 else CONTRADICTED


def compare_less(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float],
                 level: float = LEVEL, paired: bool = False) -> Comparison:
    """Claim "a < b" (a has the lower loss), one test on its own."""
    return compare_ordering([(name_a, a, name_b, b)], level, paired)[0]


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


def compare_ordering(pairs: Sequence[tuple[str, Sequence[float], str, Sequence[float]]],
                     level: float = LEVEL, paired: bool = False) -> list[Comparison]:
    """Each pair (a, values, b, values) claims a < b; Holm across the pairs' tests."""
    cis = [diff_ci(a, b, paired, level) for _, a, _, b in pairs]
    tested = [i for i, ci in enumerate(cis) if ci is not None]
    rejected, adjusted = holm([cis[i].p_two_sided() for i in tested], 1 - level)
    out: list[Comparison] = [Comparison(na, "<", nb, ONE_SEED) for na, _, nb, _ in pairs]
    for j, i in enumerate(tested):
        ci = cis[i]
        out[i] = Comparison(pairs[i][0], "<", pairs[i][2], _direction(ci, rejected[j]), ci,
                            p=ci.p_two_sided(), p_holm=adjusted[j])
    return out


def compare_noninferior(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float],
                        margin: float, level: float = LEVEL, paired: bool = False) -> Comparison:
    """Claim "a works as well as b": mean(a) - mean(b) < margin, one-sided at `level`."""
    if not margin > 0:
        raise ValueError(f"a non-inferiority margin must be positive, got {margin!r}")
    ci = diff_ci(a, b, paired, level)
    if ci is None:
        return Comparison(name_a, "≲", name_b, ONE_SEED, margin=margin)
    lower, upper = ci.one_sided_bounds(level)
    verdict = REPRODUCED if upper < margin else CONTRADICTED if lower > margin else INCONCLUSIVE
    return Comparison(name_a, "≲", name_b, verdict, ci, margin=margin)


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


def not_comparable(reason: str) -> str:
    return f"{NOT_COMPARABLE} ({reason})"


def at_scale(verdict: str, scale: str) -> str:
    """The verdict as the report prints it: prefixed with its scale below the paper scale."""
    return verdict if scale == PAPER_SCALE else f"at scale {scale}: {verdict}"


def base_verdict(text: str) -> str:
    """The verdict without its scale prefix."""
    if text.startswith("at scale ") and ": " in text:
        return text.split(": ", 1)[1]
    return text


# ----------------------------------------------------------------------------- bootstrap
@dataclass(frozen=True)
class BootCI:
    """Point estimate and percentile interval of a paired bootstrap."""

    estimate: float
    lo: float
    hi: float
    n_items: int
    resamples: int


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
    return BootCI(estimate, float(lo), float(hi), sum(a.size for a, _ in data), resamples)


def centered_diff_statistic(baselines: Sequence[float]):
    """Statistic for paired_bootstrap: mean over strata of the centered-score difference
    (acc_a - b) / (1 - b) - (acc_b - b) / (1 - b) = (acc_a - acc_b) / (1 - b)."""
    def stat(strata):
        diffs = [(a.mean(axis=1) - b.mean(axis=1)) / (1 - base) for (a, b), base in zip(strata, baselines)]
        return np.mean(diffs, axis=0)
    return stat


# ----------------------------------------------------------------------------- the studies (issue 17)
def reading_verdict(outcome: str, supports: str, contradicts: str) -> str:
    """A study whose own rule returns one of two outcomes, one supporting the paper's reading
    and one contradicting it (the line-wrap study: kernattn.tracks.char.analysis.bumpshift), as a claim's
    verdict: reproduced, contradicted, or inconclusive for anything else."""
    if outcome == supports:
        return REPRODUCED
    if outcome == contradicts:
        return CONTRADICTED
    return INCONCLUSIVE


def init_comparisons(baseline: str, values: dict[str, dict[int, float]],
                     level: float = LEVEL) -> tuple[str, list[Comparison]]:
    """"Some init beats `baseline`" (GKA's bandwidth study) in one track: init_family_comparisons
    with a single family, comparisons named by the inits alone."""
    return init_family_comparisons({"": (baseline, values)}, level)


def init_family_comparisons(families: dict[str, tuple[str, dict[str, dict[int, float]]]],
                            level: float = LEVEL) -> tuple[str, list[Comparison]]:
    """"Some init beats its baseline", across families (tracks): {family: (baseline init,
    {init: {seed: value}})}, a lower value better. Each other init x of a family against that
    family's baseline, the claim x < baseline tested paired by seed (the seeds both have),
    Holm across every pair of every family (compare_ordering); a comparison is named
    "<family>: <init>" (the init alone for the family ""). Verdict: reproduced if any init is
    significantly lower; contradicted if every other init is significantly higher;
    inconclusive (1 seed) when no pair has two seeds; otherwise inconclusive."""
    pairs = []
    for family, (baseline, values) in families.items():
        base = values[baseline]
        name = (lambda init: f"{family}: {init}") if family else (lambda init: init)
        for init, vals in values.items():
            if init == baseline:
                continue
            seeds = sorted(set(vals) & set(base))
            pairs.append((name(init), [vals[s] for s in seeds], name(baseline), [base[s] for s in seeds]))
    if not pairs:
        return NOT_RUN, []
    comps = compare_ordering(pairs, level, paired=True)
    return init_verdict(comps), comps


def init_verdict(comps: Sequence[Comparison]) -> str:
    """The verdict of init comparisons (init_family_comparisons' rule), for the whole family or
    for one family's share of its already Holm-adjusted tests."""
    verdicts = [c.verdict for c in comps]
    if not verdicts:
        return NOT_RUN
    if REPRODUCED in verdicts:
        return REPRODUCED
    if all(v == CONTRADICTED for v in verdicts):
        return CONTRADICTED
    if all(v == ONE_SEED for v in verdicts):
        return ONE_SEED
    return INCONCLUSIVE
