"""The studies' verdict rules (issue 17), on the comparison rules of comparisons.py: a study's
two-outcome reading as a verdict, "some init beats its baseline" (GKA's bandwidth study) with
Holm across every init of every track, and the exact sign test with its power gate."""

from __future__ import annotations

from collections.abc import Sequence

from .comparisons import Comparison, compare_ordering
from .levels import LEVEL, ONE_SIDED_ALPHA
from .words import CONTRADICTED, INCONCLUSIVE, NOT_RUN, REPRODUCED, is_withheld, not_judged


def reading_verdict(outcome: str, supports: str, contradicts: str) -> str:
    """A study whose own rule returns one of two outcomes, one supporting the paper's reading
    and one contradicting it (the line-wrap study: line_wrap.py), as a claim's
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
    the first pair's gate (not judged, variance not estimable) when no pair was tested;
    otherwise inconclusive."""
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


def sign_test(k: int, n: int) -> tuple[float, float]:
    """Exact sign test of k positive signs among n non-zero ones: the one-sided binomial
    p-values (P(X >= k), P(X <= k)) under X ~ Binomial(n, 1/2); (1, 1) with no signs."""
    if n == 0:
        return 1.0, 1.0
    from scipy.stats import binomtest

    return float(binomtest(k, n, 0.5, alternative="greater").pvalue), float(binomtest(k, n, 0.5, alternative="less").pvalue)


def sign_gate(n: int, what: str, alpha: float = ONE_SIDED_ALPHA) -> str | None:
    """The power gate of an exact one-sided sign test over n signs: with every sign in the
    claimed direction its p is 1/2^n, so below 6 signs (1/32 = 0.031) nothing can reach 2.5%.
    "not judged (...)" naming the count of `what` then, else None (the test can decide)."""
    if 0.5 ** n < alpha:
        return None
    needed = next(m for m in range(1, 64) if 0.5 ** m < alpha)
    return not_judged(f"{n} {what}: a sign test needs {needed} to reach {alpha:g}")


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
    if all(is_withheld(v) for v in verdicts):
        return verdicts[0]
    return INCONCLUSIVE
