"""The reading of a gap across a budget sweep (report.budget_trend, issue 48) on constructed data
with known answers: a steady gap persists, a vanishing one shrinks toward zero, a crossing one
reverses (near the step where it crosses), a null shows no difference of delta or more; and the
rest of the rule: contradicted, inconclusive, what cannot be fitted, the family's level, the
claim's combination, the pre-registered numbers."""

from __future__ import annotations

import numpy as np
import pytest

from kernattn.report.verdicts import budget_trend as bt
from kernattn.report import verdicts

# The small scale's sweep: wsd, lr 3e-3, warm-up 40, cooldown the last 20% to 0.1 x lr; the
# learning-rate sum of a run of 200, 400 and 800 steps (tracks.char.track.lr_at, summed)
STEPS = np.array([200, 400, 800])
L = np.array([0.48615, 1.03215, 2.12415])
RULE = bt.rule({})
# five seeds' own offsets (sd 0.0025) and a small budget-to-budget jitter: a gap read per seed
SEED = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])[:, None] * 0.0016
JITTER = np.array([[1, -1, 0], [0, 1, -1], [-1, 0, 1], [1, 0, -1], [-1, 1, 0]]) * 3e-4


def gaps(a: float, b: float, seed=SEED, jitter=JITTER) -> np.ndarray:
    """Per seed and budget: a + b / L, the seed's offset and the jitter."""
    return a + b / L[None, :] + seed + jitter


def test_the_small_sweeps_learning_rate_sums():
    from types import SimpleNamespace

    from kernattn.tracks.char.track import lr_at

    tp = SimpleNamespace(lr=3e-3, warmup_steps=40, max_steps=800, min_lr_ratio=0.1, schedule="wsd",
                         cooldown_fraction=0.2)
    assert [sum(lr_at(s, tp, n) for s in range(n)) for n in STEPS] == pytest.approx(L.tolist(), abs=1e-9)


def test_a_steady_gap_persists():
    """gpa_m64_rope - gpa_m64 of the audit: about -0.0095 at every budget."""
    t = bt.read(gaps(-0.0095, 0.0), L, STEPS, RULE)
    assert t.word == bt.PERSISTS
    assert t.verdict == "holds, and persists with budget (a + b/L over 200–800 steps)"
    assert t.a.hi < 0 and t.last.hi < 0 and t.n_seeds == 5 and t.crossing is None
    assert t.a.est == pytest.approx(-0.0095, abs=1e-4) and abs(t.b.est) < 1e-3


def test_a_vanishing_gap_shrinks_toward_zero():
    """-0.028 at 200 steps, -0.0064 at 800, tending to 0: it holds at 800 steps, not in the limit."""
    t = bt.read(gaps(0.0, -0.0136), L, STEPS, RULE)
    assert t.word == bt.SHRINKING and t.verdict.startswith("holds at this budget, shrinking toward zero (a + b/L")
    assert t.last.hi < 0 and t.a.lo < 0 < t.a.hi and t.b.hi < 0


def test_a_crossing_gap_reverses_near_the_step_it_crosses():
    """gpa_m64 - rope of the audit: better than RoPE at 200-800 steps, tending to +0.028: the
    fitted curve crosses 0 where L = -b / a, set here at L(900 steps) = 2.39715."""
    t = bt.read(gaps(0.028, -0.028 * 2.39715), L, STEPS, RULE)
    assert t.word == bt.REVERSES and t.crossing == 900
    assert t.verdict == "reverses with budget (crosses near 900 steps; a + b/L over 200–800 steps)"
    assert t.a.lo > 0 and t.last.hi < 0 and "largest budget's" in t.test
    # crossing at the largest budget: worse at 200 steps, no gap at 800, better in the limit
    at_end = bt.read(gaps(-0.02, 0.02 * L[-1]), L, STEPS, RULE)
    assert at_end.word == bt.REVERSES and at_end.crossing == 800 and "smallest budget's" in at_end.test
    # crossed inside the sweep and stays crossed: worse at 200 steps, better at 800 and in the limit;
    # the claim holds and persists, and the reading says the order reversed on the way
    inside = bt.read(gaps(-0.02, 0.02 * 0.75), L, STEPS, RULE)
    assert inside.word == bt.PERSISTS and "the order reversed within the sweep" in inside.test


def test_a_null_shows_no_difference_of_delta():
    t = bt.read(gaps(0.0, 0.0), L, STEPS, RULE)
    assert t.word == bt.NO_DIFFERENCE
    assert t.verdict == "no difference ≥ δ (δ = 0.01; a + b/L over 200–800 steps)"
    assert -RULE.delta < t.last.lo and t.last.hi < RULE.delta and t.a.lo < 0 < t.a.hi
    # the equivalence is an order claim's; a non-inferiority claim's boundary is its margin
    assert bt.read(gaps(0.0, 0.0), L, STEPS, RULE, equivalence=False).word == verdicts.INCONCLUSIVE


def test_a_gap_on_the_other_side_is_contradicted_and_a_wide_one_inconclusive():
    assert bt.read(gaps(0.02, 0.0), L, STEPS, RULE).word == verdicts.CONTRADICTED
    assert bt.read(gaps(0.02, 0.0), L, STEPS, RULE).verdict == "contradicted"
    wide = bt.read(gaps(0.0, 0.0, seed=SEED * 8), L, STEPS, RULE)   # sd 0.02: can tell nothing
    assert wide.word == verdicts.INCONCLUSIVE and wide.last.lo < -RULE.delta


def test_the_non_inferiority_boundary_is_the_margin():
    t = bt.read(gaps(0.01, 0.0), L, STEPS, RULE, boundary=0.03, equivalence=False)
    assert t.word == bt.PERSISTS and "below 0.03" in t.test


def test_an_unresolved_limit():
    """The largest budget's interval below 0, the limit's reaching 0, and the fitted b/L term not
    shrinking the gap (only its extrapolation is noisier): neither persists nor shrinking."""
    iv = bt.Interval
    word, test = bt._word(iv(-0.02, -0.04, 0.01), iv(0.01, 0.0, 0.02), iv(-0.01, -0.02, -0.0), iv(-0.01, -0.015, -0.005),
                          0.0, 0.01)
    assert word == bt.UNRESOLVED and "not shrinking" in test


def test_what_cannot_be_fitted_is_not_judged_and_says_what_is_missing():
    one = bt.read(gaps(-0.01, 0.0)[:, :1], L[:1], STEPS[:1], RULE)
    assert one.verdict == "not judged (budget sweep: 1 budget(s) with a learning-rate sum; a fit of a + b/L needs 2)"
    two = bt.read(gaps(-0.01, 0.0)[:2], L, STEPS, RULE)
    assert two.verdict == "not judged (budget sweep: 2 seeds with both rows at every budget; a fit needs 3)"
    same = bt.read(np.full((5, 3), -0.01), L, STEPS, RULE)
    assert same.verdict == verdicts.NOT_ESTIMABLE and verdicts.is_withheld(same.verdict)
    with pytest.raises(ValueError):
        bt.read(gaps(-0.01, 0.0), L[:2], STEPS, RULE)
    with pytest.raises(ValueError):
        bt.read(gaps(-0.01, 0.0), -L, STEPS, RULE)


def test_every_interval_is_read_at_the_familys_bonferroni_level():
    """A gap of -0.002 (sd 0.0013, 5 seeds: t = 3.4) excludes 0 at 95% (t_{0.975,4} = 2.78) but
    not at 1 - 0.05/4 (t = 4.6), the level of a family of 4 comparisons."""
    alone = bt.read(gaps(-0.002, 0.0, seed=SEED * 0.5), L, STEPS, RULE)
    four = bt.read(gaps(-0.002, 0.0, seed=SEED * 0.5), L, STEPS, RULE, family_size=4)
    assert alone.level == pytest.approx(0.95) and four.level == pytest.approx(0.9875)
    assert alone.last.hi < 0 and alone.word == bt.PERSISTS
    assert four.last.lo < 0 < four.last.hi and four.word == bt.NO_DIFFERENCE


def test_budgets_in_any_order_are_read_ascending():
    g = gaps(0.028, -0.028 * 2.39715)
    t = bt.read(g[:, ::-1], L[::-1], STEPS[::-1], RULE)
    assert t.word == bt.REVERSES and t.steps == (200, 400, 800) and t.crossing == 900


def test_crossing_steps_by_hand():
    # L = b / (boundary - a) = 0.5 / 0.25 = 2; steps = 100 + 300 L on the sweep's line -> 700
    lrs, steps = np.array([1.0, 3.0]), np.array([400, 1000])
    assert bt.crossing_steps(-0.25, 0.5, 0.0, lrs, steps) == 700
    assert bt.crossing_steps(-0.25, -0.5, 0.0, lrs, steps) is None      # never meets 0 at L > 0
    assert bt.crossing_steps(-1.0, 0.5, 0.0, lrs, steps) is None        # met only before the sweep began
    assert bt.crossing_steps(0.0, 0.5, 0.0, lrs, steps) is None


def test_a_claims_comparisons_combine():
    persists, shrinks = f"{bt.PERSISTS} (m)", f"{bt.SHRINKING} (m)"
    reverses, null = f"{bt.REVERSES} (crosses near 900 steps; m)", f"{bt.NO_DIFFERENCE} (δ = 0.01; m)"
    assert bt.combine([persists, persists]) == persists
    assert bt.combine([persists, shrinks]) == shrinks
    assert bt.combine([persists, reverses]) == reverses
    assert bt.combine([reverses, verdicts.CONTRADICTED]) == verdicts.CONTRADICTED
    assert bt.combine([persists, null]) == null
    assert bt.combine([persists, "not judged (x)"]) == "not judged (x)"
    assert bt.combine([persists, verdicts.INCONCLUSIVE]) == verdicts.INCONCLUSIVE
    assert bt.combine([persists, verdicts.NOT_RUN]) == verdicts.NOT_RUN
    assert bt.combine([verdicts.REPRODUCED, verdicts.REPRODUCED]) == verdicts.REPRODUCED   # no sweep: verdicts.combine
    assert verdicts.at_scale(persists, "small") == f"at scale small: {persists}"


def test_the_rule_is_pre_registered_and_checked():
    r = bt.rule({})   # the shipped paper_numbers.yaml
    assert (r.delta, r.min_budgets, r.min_seeds, r.level) == (0.01, 2, 3, 0.95)
    own = {"form": "a + b/L", "delta": 0.02, "min_budgets": 3, "min_seeds": 4, "level": 0.9}
    assert bt.rule({"budget_trend": own}).delta == 0.02
    with pytest.raises(ValueError, match="form must be 'a \\+ b/L'"):
        bt.rule({"budget_trend": {**own, "form": "a + b log L"}})
    with pytest.raises(ValueError, match="needs delta > 0"):
        bt.rule({"budget_trend": {**own, "min_budgets": 1}})
    with pytest.raises(ValueError, match="budget_trend needs delta"):
        bt.rule({"budget_trend": {"form": "a + b/L"}})
