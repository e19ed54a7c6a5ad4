"""One reading of a compared gap across a budget sweep (issue 48), in place of "gap stable at this
budget" and the budget gate for comparisons a scale trains at several budgets.

The model (paper_numbers.yaml `budget_trend`, pre-registered 2026-12-02): the gap a - b of a
run of learning-rate sum L is g(L) = a + b / L. `a` is where the gap tends as training goes
on; b / L is the part that training removes. The fit is a weighted least squares over the
budgets (weights: 1 / the variance over seeds of the gap at each budget, so the noisy short
budgets count less) applied to each seed's own gaps; the seed is the independent unit (a
seed's budgets share its run up to each branch point), so `a`, `b` and the gap at every
budget get a Student t interval over seeds.

Every interval is read at 1 - 0.05 / k, k the comparisons of the claim's family (Bonferroni;
k counts every comparison of the family, judged or not, so a withheld small effect cannot
shrink it). With the claimed side below the boundary (0 for "a < b", the margin for "a works
as well as b"; lower is better), an interval is below, above, or across the boundary, and
the first of these rules that applies gives the word:

  1. the limit's interval (a) and the largest budget's lie on opposite sides, or the largest
     budget's reaches the boundary while the limit's and the smallest budget's lie on opposite
     sides -> "reverses with budget (crosses near N steps)", N where the fitted curve meets
     the boundary, read on the sweep's own steps-to-L line (a gap that reversed within the
     sweep and stays reversed in the limit is read by rules 2-3, which say it reversed);
  2. the largest budget's interval below -> "holds, and persists with budget" when the
     limit's is below too; "holds at this budget, shrinking toward zero" when the limit's
     reaches the boundary and the fitted b / L term leans the gap away from it (it shrinks as
     L grows); "holds at this budget, its limit unresolved" when the limit's reaches the
     boundary but the fit does not shrink the gap (the extrapolation is only noisier);
  3. the largest budget's interval above -> "contradicted";
  4. an order claim (boundary 0) whose largest budget's interval lies inside (-delta, +delta)
     (two one-sided tests, each at the same level) and whose limit's interval reaches 0
     -> "no difference ≥ δ";
  5. otherwise "inconclusive".
"not judged" only where the sweep cannot be fitted: fewer than `min_budgets` budgets or
`min_seeds` seeds with every budget; "variance not estimable" where the seeds do not differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import shipped, stats
from . import levels, words

FORM = "a + b/L"
PERSISTS = "holds, and persists with budget"
SHRINKING = "holds at this budget, shrinking toward zero"
UNRESOLVED = "holds at this budget, its limit unresolved"
REVERSES = "reverses with budget"
NO_DIFFERENCE = "no difference ≥ δ"
HOLDING = (PERSISTS, SHRINKING, UNRESOLVED)
WORDS = (PERSISTS, SHRINKING, UNRESOLVED, REVERSES, NO_DIFFERENCE, words.CONTRADICTED, words.INCONCLUSIVE)


@dataclass(frozen=True)
class Rule:
    """paper_numbers.yaml `budget_trend`."""

    delta: float        # smallest effect of interest (the judged loss's unit): the equivalence margin
    min_budgets: int    # distinct budgets a fit needs
    min_seeds: int      # seeds with every budget a fit needs
    level: float        # of every interval before the family's Bonferroni correction


def rule(papers: dict) -> Rule:
    """The rule of `papers`, or of the shipped file when it has none (a claims file of one's own is
    judged under the shipped file's pre-registered rules)."""
    t = papers.get("budget_trend") or shipped.paper_numbers().get("budget_trend") or {}
    try:
        r = Rule(float(t["delta"]), int(t["min_budgets"]), int(t["min_seeds"]), float(t["level"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"paper_numbers.yaml: budget_trend needs delta, min_budgets, min_seeds and level "
                         f"({exc})") from None
    if t.get("form") != FORM:
        raise ValueError(f"paper_numbers.yaml: budget_trend.form must be {FORM!r} (the one form implemented); "
                         f"got {t.get('form')!r}")
    if not (r.delta > 0 and r.min_budgets >= 2 and r.min_seeds >= 2 and 0 < r.level < 1):
        raise ValueError(f"paper_numbers.yaml: budget_trend needs delta > 0, min_budgets >= 2, min_seeds >= 2 and "
                         f"level in (0, 1); got {r}")
    return r


@dataclass(frozen=True)
class Interval:
    est: float
    lo: float
    hi: float

    def side(self, boundary: float) -> int:
        """-1: below the boundary, +1: above it, 0: reaching it."""
        return -1 if self.hi < boundary else 1 if self.lo > boundary else 0

    def text(self, digits: int = 4) -> str:
        return f"{self.est:+.{digits}f} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]"


@dataclass(frozen=True)
class Trend:
    """The reading of one gap across the sweep: its word, the verdict it prints, and what it rests on."""

    word: str                       # one of WORDS, or words.NOT_JUDGED / words.NOT_ESTIMABLE
    verdict: str                    # the word with the model it rests on, as the claim prints it
    test: str = ""                  # which rule gave the word
    model: str = ""                 # "a + b/L over 200–800 steps"
    a: Interval | None = None       # the limit
    b: Interval | None = None       # the coefficient of 1 / L
    gaps: tuple[Interval, ...] = ()  # the gap at each budget, ascending
    steps: tuple[int, ...] = ()
    crossing: int | None = None     # steps where the fitted gap meets the boundary past the smallest
                                    # budget (None: nowhere); the verdict names it when it reverses
    level: float = levels.LEVEL
    n_seeds: int = 0

    @property
    def last(self) -> Interval | None:
        return self.gaps[-1] if self.gaps else None

    def text(self) -> str:
        """What was read, for the claim's detail."""
        if self.a is None:
            return self.verdict
        per = ", ".join(f"{n:,} steps {g.text()}" for n, g in zip(self.steps, self.gaps))
        return (f"{self.model}: a (the limit) {self.a.text()}, b {self.b.text(3)}; the gap at {per}; "
                f"{self.n_seeds} seeds, intervals at {self.level:.2%} ({self.test})")


def _withheld(verdict: str, word: str = words.NOT_JUDGED) -> Trend:
    return Trend(word, verdict)


def _t_interval(values: np.ndarray, level: float) -> Interval:
    ci = stats.mean_ci(values.tolist(), level)
    return Interval(ci.mean, ci.lo, ci.hi)


def _fit(gaps: np.ndarray, lr_sums: np.ndarray) -> np.ndarray:
    """Per seed (a_s, b_s): the weighted least-squares fit of a + b / L to its gaps, the weights
    the inverse variances over seeds of each budget's gap (floored at the measurement's
    resolution), the same for every seed, so the mean of the seeds' fits is the fit of their mean."""
    var = np.maximum(gaps.var(axis=0, ddof=1), stats.RESOLUTION ** 2)
    x = np.column_stack([np.ones_like(lr_sums), 1.0 / lr_sums])
    w = 1.0 / var
    hat = np.linalg.solve(x.T @ (w[:, None] * x), (x * w[:, None]).T)   # (2, budgets)
    return gaps @ hat.T                                                   # (seeds, 2)


def crossing_steps(a: float, b: float, boundary: float, lr_sums: np.ndarray, steps: np.ndarray) -> int | None:
    """The steps at which a + b / L = boundary (L = b / (boundary - a)), on the least-squares
    line of steps against L through the sweep's budgets (under warmup-stable-decay L grows
    linearly in the budget past the warm-up), rounded to two significant figures; None when the
    fitted curve meets the boundary nowhere past the smallest budget (a crossing before the
    sweep began is an extrapolation backwards, not a reading)."""
    if a == boundary or not b / (boundary - a) > lr_sums.min():
        return None
    slope, icpt = np.polyfit(lr_sums, steps.astype(float), 1)
    n = icpt + slope * b / (boundary - a)
    if not (math.isfinite(n) and n > 0):
        return None
    return int(round(n, 1 - int(math.floor(math.log10(n)))))


def _model(steps: np.ndarray) -> str:
    return f"{FORM} over {int(steps[0]):,}–{int(steps[-1]):,} steps"


def _word(a: Interval, b: Interval, first: Interval, last: Interval, boundary: float, delta: float | None
          ) -> tuple[str, str]:
    """(word, the rule that gave it): module docstring, rules 1-5."""
    limit, now = a.side(boundary), last.side(boundary)
    if limit and now == -limit:
        return REVERSES, f"the limit's interval and the largest budget's lie on opposite sides of {boundary:g}"
    if limit and now == 0 and first.side(boundary) == -limit:
        return REVERSES, (f"the limit's interval and the smallest budget's lie on opposite sides of {boundary:g}, "
                          f"the largest budget's reaching it")
    early = (f" (the smallest budget's lay on the other side: the order reversed within the sweep)"
             if first.side(boundary) == -now else "")
    if now < 0:
        if limit < 0:
            return PERSISTS, f"the largest budget's interval and the limit's lie below {boundary:g}{early}"
        toward = np.sign(b.est) == np.sign(last.est - boundary)
        return ((SHRINKING, f"the largest budget's interval lies below {boundary:g}; the limit's reaches it, "
                            f"the fitted b/L term shrinking the gap as L grows") if toward else
                (UNRESOLVED, f"the largest budget's interval lies below {boundary:g}; the limit's reaches it, "
                             f"the fit not shrinking the gap"))
    if now > 0:
        return words.CONTRADICTED, f"the largest budget's interval lies above {boundary:g}{early}"
    if delta is not None and -delta < last.lo and last.hi < delta and limit == 0:
        return NO_DIFFERENCE, (f"the largest budget's interval lies inside ±{delta:g} (two one-sided tests) "
                               f"and the limit's reaches 0")
    return words.INCONCLUSIVE, f"the largest budget's interval reaches {boundary:g} and no trend rule applies"


def _verdict(word: str, model: str, crossing: int | None, delta: float) -> str:
    if word == REVERSES:
        near = f"crosses near {crossing:,} steps" if crossing else "the fit never meets the boundary"
        return f"{REVERSES} ({near}; {model})"
    if word == NO_DIFFERENCE:
        return f"{NO_DIFFERENCE} (δ = {delta:g}; {model})"
    return f"{word} ({model})" if word in HOLDING else word


def read(gaps, lr_sums, steps, r: Rule, boundary: float = 0.0, family_size: int = 1,
         equivalence: bool = True) -> Trend:
    """The reading (module docstring) of per-seed gaps `gaps` [seeds, budgets] at budgets of
    learning-rate sums `lr_sums` and `steps` [budgets]; `equivalence`: rule 4 applies (an order
    claim, boundary 0). Pure: arrays in, a Trend out."""
    gaps, lr_sums, steps = (np.asarray(x, dtype=float) for x in (gaps, lr_sums, steps))
    if gaps.ndim != 2 or gaps.shape[1] != lr_sums.size or steps.size != lr_sums.size:
        raise ValueError(f"gaps must be [seeds, budgets] with one L and one step count per budget: "
                         f"{gaps.shape}, {lr_sums.shape}, {steps.shape}")
    if not (np.all(np.isfinite(gaps)) and np.all(np.isfinite(lr_sums)) and np.all(lr_sums > 0)):
        raise ValueError("gaps and learning-rate sums must be finite, the sums positive")
    order = np.argsort(lr_sums)
    gaps, lr_sums, steps = gaps[:, order], lr_sums[order], steps[order]
    if np.unique(lr_sums).size < r.min_budgets:
        return _withheld(words.not_judged(f"budget sweep: {np.unique(lr_sums).size} budget(s) with a learning-rate "
                                          f"sum; a fit of {FORM} needs {r.min_budgets}"))
    if gaps.shape[0] < r.min_seeds:
        return _withheld(words.not_judged(f"budget sweep: {words.seeds_text(gaps.shape[0])} with both rows at every "
                                          f"budget; a fit needs {r.min_seeds}"))
    level = 1 - (1 - r.level) / max(1, family_size)
    coef = _fit(gaps, lr_sums)
    # a seed spread below what the measurement resolves, of the limit or of the largest budget's
    # gap, would give an interval of the arithmetic, not of the seeds (stats.RESOLUTION)
    if min(coef[:, 0].std(ddof=1), gaps[:, -1].std(ddof=1)) <= stats.RESOLUTION:
        return _withheld(words.NOT_ESTIMABLE, words.NOT_ESTIMABLE)
    a, b = _t_interval(coef[:, 0], level), _t_interval(coef[:, 1], level)
    per = tuple(_t_interval(gaps[:, j], level) for j in range(gaps.shape[1]))
    word, test = _word(a, b, per[0], per[-1], boundary, r.delta if equivalence and boundary == 0 else None)
    model, cross = _model(steps), crossing_steps(a.est, b.est, boundary, lr_sums, steps)
    return Trend(word, _verdict(word, model, cross, r.delta), test, model, a, b, per,
                 tuple(int(s) for s in steps), cross, level, gaps.shape[0])


def word_of(verdict: str) -> str | None:
    """The trend word a verdict starts with, or None for any other verdict."""
    return next((w for w in (REVERSES, NO_DIFFERENCE, *HOLDING) if verdict.startswith(w)), None)


def combine(readings: list[str]) -> str:
    """One verdict for a claim of several comparisons read across the sweep: contradicted if
    any is; a reversal if any reverses; not run if a row is missing; "no difference" if a pair
    of an ordering shows none; every comparison holding: "persists" when all persist, else the
    first "holds at this budget" reading; then the first withheld verdict; else inconclusive.
    Without a trend word among them: words.combine."""
    if not any(word_of(v) for v in readings):
        return words.combine(readings)
    first = {w: next((v for v in readings if word_of(v) == w), None) for w in (REVERSES, NO_DIFFERENCE)}
    if words.CONTRADICTED in readings:
        return words.CONTRADICTED
    if first[REVERSES]:
        return first[REVERSES]
    if words.NOT_RUN in readings:
        return words.NOT_RUN
    if first[NO_DIFFERENCE]:
        return first[NO_DIFFERENCE]
    if all(word_of(v) in HOLDING for v in readings):
        return next((v for v in readings if word_of(v) != PERSISTS), readings[0])
    return next((v for v in readings if words.is_withheld(v)), words.INCONCLUSIVE)
