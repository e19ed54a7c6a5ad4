"""Comparisons of two rows over seeds, and their verdicts (lower is better: the metric is a loss).

A claim's comparisons are tests of one *family*: every comparison of the claims that read one
figure or table (a claim's `family` in paper_numbers.yaml; by default the claim alone), corrected
together with Holm's step-down procedure (report.stats.holm): the smallest of k p-values is
compared with alpha/k, the next with alpha/(k-1), ..., stopping at the first that is not below
its threshold. Holm controls the family-wise error at alpha for any dependence between the tests
(they share rows) and is uniformly more powerful than Bonferroni. The level, alpha, power and
MIN_SEEDS are report.verdicts.levels'.
- Each comparison is two one-sided tests at alpha/2 = 2.5% (`ONE_SIDED_ALPHA`), one for each
  direction; its p-value is the smaller one-sided p doubled (the two-sided p). Alone (a family
  of one) a comparison is "reproduced" exactly when the two-sided 95% interval lies on the
  claimed side of its boundary, so that interval and the verdict agree.
- In a family of k > 1 tests the 95% interval and the verdict can disagree (an interval
  clear of the boundary whose test Holm does not reject), so every tested comparison also
  carries the interval its Holm verdict is read at (report.stats.holm_levels; Comparison.holm_lo,
  holm_hi, holm_level), and the page prints that one: the test with the j-th smallest of k
  p-values (j = 1..k), reached by Holm, gets the two-sided 1 - alpha/(k - j + 1) interval, which
  excludes the boundary exactly when its p is below alpha/(k - j + 1), i.e. when Holm rejects
  it. Holm stops at the first test not rejected (step s); every test after it is not rejected
  whatever its own p ("inconclusive", Holm stopped at an earlier test), and its interval is
  read at step s's level, 1 - alpha/(k - s + 1), the level Strassburger & Bretz (2008) give the
  hypotheses Holm retains: its p is at least the stopping test's, so that interval contains
  the boundary too. With these intervals, interval and verdict agree for every tested
  comparison. What they do not give is simultaneous coverage: each is an interval at its own
  level, not one of a set that covers every difference at once with 95% (the compatible
  simultaneous bounds of Strassburger & Bretz shrink a rejected test's bound to the boundary
  itself, which says nothing of the size; see holm_levels).
- "a < b" (`compare_less`, `compare_ordering`): boundary 0; rejected with a - b < 0 ->
  reproduced, with a - b > 0 -> contradicted, otherwise inconclusive. An ordering
  "a < b < c" is the family of its adjacent pairs.
- "a works as well as b" (`compare_noninferior`): a non-inferiority claim, boundary +delta
  (the margin, its rule fixed before the runs: `noninferiority_margin`). Reproduced if the
  upper 97.5% bound of a - b lies below +delta (a better than b passes); contradicted if the
  lower 97.5% bound lies above +delta; inconclusive otherwise (in a Holm family, the bounds
  of its step's interval). Better than b is never a contradiction. A margin taken from a
  measured reference gap (NoPE - RoPE) uses the gap's conservative end, the lower end of its
  95% interval, when the claim says `end: lower`: the smallest gain the reference is shown to
  have, so a noisy reference cannot widen the margin.
- Gates before any verdict, each printed in the verdict when it fails: fewer than MIN_SEEDS
  seeds in either row -> "not judged (2 seeds)"; no resolvable spread -> "variance not estimable";
  the gates of report.verdicts.gates (converged, premise met) -> "not judged (<gate>: <why>)". A
  comparison that does not pass its gates is not tested, but it stays in its family (k counts
  it, as a test never rejected): a gate must not shrink Holm's k by the comparisons it holds back
  (issue 48).
- Every tested comparison reports its minimum detectable effect (report.stats.mde): the true
  difference its test would detect with power 80% at one-sided alpha/2k (Bonferroni's, Holm's
  strictest step, for a family of k tests), given its standard error and degrees of freedom.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..stats import DiffCI, diff_ci, holm, holm_levels, mde
from .levels import LEVEL, MIN_SEEDS
from .words import CONTRADICTED, INCONCLUSIVE, NOT_ESTIMABLE, REPRODUCED, not_judged, seeds_text


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
    p: float | None = None        # two-sided p-value of the comparison's test (None: not tested)
    p_holm: float | None = None   # Holm-adjusted within its family
    mde: float | None = None      # minimum detectable effect at its seeds and spread (`mde`)
    family_size: int = 0          # tests of its family (Holm's k)
    holm_level: float | None = None   # the level its verdict is read at (holm_levels; None: not tested)
    holm_lo: float | None = None      # the two-sided holm_level interval of a - b
    holm_hi: float | None = None
    holm_step: int | None = None      # its rank among the family's p-values, 1 = smallest
    holm_stop: int | None = None      # the step Holm stopped at, when that came before this test's
    trend: object | None = None       # budget_trend.Trend: the reading across a budget sweep, which
                                      # then gives the verdict (holm_*: its interval at the largest budget)

    @property
    def holm_reached(self) -> bool:
        """Whether Holm's step-down reached this test (False: it stopped at an earlier one)."""
        return self.holm_stop is None


@dataclass(frozen=True)
class Test:
    """A comparison to make: a < b (margin None) or a no worse than b by more than `margin`;
    `gate` is a failed gate's verdict (not_judged(...)) when the comparison must not be tested."""

    a: str
    va: Sequence[float]
    b: str
    vb: Sequence[float]
    paired: bool = False
    margin: float | None = None
    gate: str | None = None
    note: str = ""

    @property
    def relation(self) -> str:
        return "<" if self.margin is None else "≲"

    @property
    def boundary(self) -> float:
        return 0.0 if self.margin is None else self.margin


def _gate(test: Test, ci: DiffCI | None) -> str | None:
    """The verdict a failed gate gives (in order: the caller's gate, seeds, spread), or None."""
    if test.gate is not None:
        return test.gate
    n = min(len(test.va), len(test.vb))
    if n < MIN_SEEDS:
        return not_judged(seeds_text(n))
    if ci is None or not ci.estimable:
        return NOT_ESTIMABLE
    return None


def judge_family(tests: Sequence[Test], level: float = LEVEL) -> list[Comparison]:
    """Every comparison of one family (module docstring), Holm across those that pass their gates."""
    cis = [diff_ci(t.va, t.vb, t.paired, level) for t in tests]
    gates = [_gate(t, ci) for t, ci in zip(tests, cis)]
    tested = [i for i, g in enumerate(gates) if g is None]
    pvals = [cis[i].p_two_sided(tests[i].boundary) for i in tested]
    # a withheld comparison stays in its family as a test never rejected (p = 1): otherwise the
    # family's k would shrink by exactly the comparisons a gate held back, the small effects
    everyone = pvals + [1.0] * (len(tests) - len(tested))
    rejected, adjusted = holm(everyone, 1 - level)
    steps = holm_levels(everyone, 1 - level)
    k = len(tests)
    out = []
    for i, (t, ci, g) in enumerate(zip(tests, cis, gates)):
        common = {"ci": ci, "margin": t.margin, "note": t.note, "mde": mde(ci, max(k, 1)), "family_size": k}
        if g is not None:
            out.append(Comparison(t.a, t.relation, t.b, g, p=ci.p_two_sided(t.boundary) if ci else None, **common))
            continue
        j = tested.index(i)
        verdict = INCONCLUSIVE if not rejected[j] else REPRODUCED if ci.diff < t.boundary else CONTRADICTED
        alpha_j, step, stop = steps[j]
        lo, hi = ci.interval(1 - alpha_j)
        out.append(Comparison(t.a, t.relation, t.b, verdict, p=pvals[j], p_holm=adjusted[j], holm_level=1 - alpha_j,
                              holm_lo=lo, holm_hi=hi, holm_step=step, holm_stop=stop, **common))
    return out


def compare_less(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float],
                 level: float = LEVEL, paired: bool = False) -> Comparison:
    """Claim "a < b" (a has the lower loss), one test on its own."""
    return compare_ordering([(name_a, a, name_b, b)], level, paired)[0]


def compare_ordering(pairs: Sequence[tuple[str, Sequence[float], str, Sequence[float]]],
                     level: float = LEVEL, paired: bool = False) -> list[Comparison]:
    """Each pair (a, values, b, values) claims a < b; one family, Holm across the pairs' tests."""
    return judge_family([Test(na, a, nb, b, paired) for na, a, nb, b in pairs], level)


def compare_noninferior(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float],
                        margin: float, level: float = LEVEL, paired: bool = False) -> Comparison:
    """Claim "a works as well as b": mean(a) - mean(b) < margin (module docstring)."""
    if not margin > 0:
        raise ValueError(f"a non-inferiority margin must be positive, got {margin!r}")
    return judge_family([Test(name_a, a, name_b, b, paired, margin=margin)], level)[0]


MARGIN_ENDS = (None, "lower")   # paper_numbers.yaml `end`: None = the point estimate (older configs)


def noninferiority_margin(fraction: float, nope: Sequence[float], rope: Sequence[float],
                          paired: bool, level: float = LEVEL, end: str | None = None) -> tuple[float | None, str]:
    """(margin, why) for "works as well as RoPE at modelling position": `fraction` (fixed in
    paper_numbers.yaml before the runs) of what RoPE gains over no positions at this scale,
    NoPE - RoPE. `end` "lower": of the lower end of that gain's `level` interval, the least gain
    the runs establish (a noisy reference then narrows the margin instead of widening it);
    None: of its point estimate. The why-text names which. None, with the reason, when the
    gain is not established: the interval of NoPE - RoPE must lie above 0 (an absent gain
    would make any margin vacuous)."""
    if not 0 < fraction < 1:
        raise ValueError(f"the margin's fraction must lie in (0, 1), got {fraction!r}")
    if end not in MARGIN_ENDS:
        raise ValueError(f"the margin's end must be one of {MARGIN_ENDS}, got {end!r}")
    ci = diff_ci(nope, rope, paired, level)
    if ci is None or not ci.estimable:
        gap = (sum(nope) / len(nope)) - (sum(rope) / len(rope))
        return None, f"NoPE − RoPE gap {gap:+.4f} without an interval ({seeds_text(min(len(nope), len(rope)))})"
    if not ci.lo > 0:
        return None, f"RoPE gains nothing established over NoPE: NoPE − RoPE {ci.diff:+.4f} [{ci.lo:+.4f}, {ci.hi:+.4f}]"
    pct = f"{level:.0%}"
    if end == "lower":
        return fraction * ci.lo, (f"{fraction:g} × lower end of NoPE − RoPE {pct} interval "
                                  f"({ci.lo:.4f}; estimate {ci.diff:.4f})")
    return fraction * ci.diff, (f"{fraction:g} × NoPE − RoPE point estimate "
                                f"({ci.diff:.4f}; {pct} interval [{ci.lo:.4f}, {ci.hi:.4f}])")


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
