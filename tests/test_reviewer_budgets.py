"""The budget sweep's arrays and the recipe arms (tracks.char.report_budgets, issues 37 and 48) on
constructed data with known answers. The reading of the arrays (g = a + b/L) is
tests/test_budget_trend.py's. Until 2026-12-02 a swept gap passed a gate of its own (same sign at
every budget, shrinking by at most 10% between budgets); report.budget_trend replaced it."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from kernattn.report import stats, verdicts
from kernattn.report.verdicts import comparisons
from kernattn.tracks.char import report_budgets as rb

BUDGETS = [200, 400, 800]
L = {200: 0.486, 400: 1.032, 800: 2.124}


def values(gaps_a_minus_b, seeds=range(5), b_seeds=None):
    """Rows a and b with the gap a - b at each budget, the same for every seed (+ a seed's jitter)."""
    out = {"a": {}, "b": {}}
    for budget, gap in zip(BUDGETS, gaps_a_minus_b):
        out["b"][budget] = {s: 2.0 - budget / 1e4 for s in (seeds if b_seeds is None else b_seeds)}
        out["a"][budget] = {s: 2.0 - budget / 1e4 + gap + 1e-4 * s for s in seeds}
    return out


def sums(v, lr=L):
    return {row: {n: {s: lr[n] for s in by_seed} for n, by_seed in by_budget.items()} for row, by_budget in v.items()}


def test_the_sweep_is_per_seed_gaps_and_the_budgets_learning_rate_sums():
    v = values([-0.02, -0.025, -0.03])
    gaps, lrs, seeds = rb.sweep("a", "b", v, sums(v), BUDGETS)
    assert seeds == [0, 1, 2, 3, 4] and lrs.tolist() == [0.486, 1.032, 2.124]
    assert gaps.shape == (5, 3) and gaps[2].tolist() == pytest.approx([-0.0198, -0.0248, -0.0298], abs=1e-12)


def test_unequal_seeds_are_read_on_the_seeds_both_rows_have_at_every_budget():
    """Fault 3d of issue 48: the x1 twins (3 seeds) against RoPE (5): paired on 0-2, never one value."""
    v = values([-0.02, -0.025, -0.03], seeds=range(3), b_seeds=range(5))
    gaps, _, seeds = rb.sweep("a", "b", v, sums(v), BUDGETS)
    assert seeds == [0, 1, 2] and gaps.shape == (3, 3)
    del v["a"][400][2]                      # seed 2's branch at 400 not finished: not read
    assert rb.sweep("a", "b", v, sums(v), BUDGETS)[2] == [0, 1]


def test_what_a_sweep_lacks_is_named():
    v = values([-0.02, -0.025, -0.03])
    del v["b"][400]
    assert rb.sweep("a", "b", v, sums(v), BUDGETS).startswith("no seed has finished runs of a and b at every budget")
    v = values([-0.02, -0.025, -0.03])
    s = sums(v)
    s["b"][200][3] = None
    assert rb.sweep("a", "b", v, s, BUDGETS).startswith("b-s3-b200 has no lr.npy")
    s = sums(v)
    s["a"][800][1] = None
    assert rb.sweep("a", "b", v, s, BUDGETS).startswith("a-s1 has no lr.npy")
    s = sums(v)
    s["a"][400][0] = 1.5
    assert rb.sweep("a", "b", v, s, BUDGETS) == "the runs at budget 400 differ in learning-rate sum (1.032–1.5)"


def test_learning_rate_sums_are_read_from_each_run_and_branch(tmp_path):
    """lr_sums: the sum of lr.npy of a run (its full budget) and of each branch; None without one."""
    from kernattn.tracks.char.stages import budget_dir, run_dir

    p = SimpleNamespace(train=SimpleNamespace(max_steps=8, budgets=(4,), out_dir=str(tmp_path)))
    runs = pd.DataFrame({"run_id": ["r-s0", "r-s1"], "row": ["r", "r"], "seed": [0, 1]})
    for folder, rates in ((run_dir(p, "r-s0"), [0.1] * 8), (budget_dir(p, "r-s0", 4), [0.1, 0.1, 0.05, 0.01])):
        folder.mkdir(parents=True)
        np.save(folder / "lr.npy", np.asarray(rates))
    got = rb.lr_sums(p, runs)
    assert got["r"][8][0] == pytest.approx(0.8) and got["r"][4][0] == pytest.approx(0.26)
    assert got["r"][8][1] is None and got["r"][4][1] is None


def test_a_non_inferiority_claim_is_read_against_its_margin():
    """Fault 3b of issue 48: the budget gate read "a works as well as b" against 0, not its margin.
    A gap of +0.01 at every budget, below a margin of 0.03: holds against the margin (it would be
    "contradicted" against 0)."""
    from kernattn.report.verdicts import budget_trend

    v = values([0.01, 0.01, 0.01])
    va, vb = [v["a"][800][s] for s in range(5)], [v["b"][800][s] for s in range(5)]
    r = budget_trend.rule({})
    ni, = rb.judge_family([comparisons.Test("a", va, "b", vb, True, margin=0.03)], v, sums(v), BUDGETS, r)
    assert ni.verdict.startswith(budget_trend.PERSISTS) and ni.relation == "≲" and ni.margin == 0.03
    assert "lie below 0.03" in ni.trend.test
    less, = rb.judge_family([comparisons.Test("a", va, "b", vb, True)], v, sums(v), BUDGETS, r)
    assert less.verdict == verdicts.CONTRADICTED


def test_a_withheld_margin_and_a_missing_sweep_are_not_judged_and_stay_in_the_family():
    from kernattn.report.verdicts import budget_trend

    v = values([-0.02, -0.025, -0.03])
    va, vb = [v["a"][800][s] for s in range(5)], [v["b"][800][s] for s in range(5)]
    tests = [comparisons.Test("a", va, "b", vb, True, margin=0.03, gate=verdicts.not_judged("RoPE gains nothing")),
             comparisons.Test("a", va, "c", vb, True)]
    got = rb.judge_family(tests, v, sums(v), BUDGETS, budget_trend.rule({}))
    assert got[0].verdict == "not judged (RoPE gains nothing)"
    assert got[1].verdict.startswith("not judged (budget sweep: no seed has finished runs of a and c")
    assert {c.family_size for c in got} == {2}


def row(name, variant="gpa", options=None, scale=None):
    return SimpleNamespace(name=name, variant=variant, options=options or {"n_kernels": 8}, variant_lr_scale=scale)


def test_recipe_arm_maps_rows_with_their_own_parameters_to_their_twins():
    rows = [row("rope", "softmax", {"position": "rope"}), row("gpa"), row("gpa_lr1", scale=1.0),
            row("lrope", "softmax", {"position": "learned_rope"})]
    runs = pd.DataFrame({"row": ["rope", "gpa", "gpa_lr1", "lrope"], "n_variant_params": [0, 512, 512, 32]})
    arms = rb.recipe_arm(rows, 10.0, runs)
    # rope has nothing the factor speeds up: itself; gpa: its twin; learned RoPE: no twin here
    assert arms.primary == {"rope": "rope", "gpa": "gpa_lr1", "gpa_lr1": "gpa_lr1", "lrope": None}
    assert arms.other == {"rope": "rope", "gpa": "gpa", "gpa_lr1": "gpa", "lrope": "lrope"}
    assert arms.factor == 10.0
    assert rb.recipe_arm(rows, 1.0, runs.iloc[:2]) is None   # every trained row at 1 x: no arm


def test_recipe_arm_reads_rows_named_at_the_papers_recipe_with_twins_at_another_factor():
    """small_long: the rows as the claims name them train at 1 x, their twins at 10 x."""
    rows = [row("rope", "softmax", {"position": "rope"}), row("gpa"), row("gpa_lr10", scale=10.0),
            row("lrope", "softmax", {"position": "learned_rope"})]
    runs = pd.DataFrame({"row": ["rope", "gpa", "gpa_lr10", "lrope"], "n_variant_params": [0, 512, 512, 32]})
    arms = rb.recipe_arm(rows, 1.0, runs)
    assert arms.primary == {"rope": "rope", "gpa": "gpa", "gpa_lr10": "gpa", "lrope": "lrope"}
    assert arms.other == {"rope": "rope", "gpa": "gpa_lr10", "gpa_lr10": "gpa_lr10", "lrope": None}
    assert arms.factor == 10.0


def comp(lo, hi):
    ci = stats.DiffCI((lo + hi) / 2, 0.01, 4, (hi - lo) / 2, lo, hi, True, 5)
    return comparisons.Comparison("a", "<", "b", verdicts.INCONCLUSIVE, ci=ci)


def test_the_verdict_depends_on_the_recipe_when_the_arms_intervals_exclude_0_on_opposite_sides():
    """Issue 48: 000-gpa-beats-rope was -0.0175 [-0.0307, -0.0043] at x10 and +0.0584 [+0.0450,
    +0.0719] at x1, both withheld, and printed no "depends on the recipe". The rule reads the
    intervals, judged or not."""
    x10, x1 = comp(-0.0307, -0.0043), comp(0.0450, 0.0719)
    assert rb.depends_on_recipe([x1], [x10])
    assert not rb.depends_on_recipe([x1], [comp(-0.01, 0.02)])        # one interval reaches 0
    assert not rb.depends_on_recipe([x1], [comp(0.01, 0.02)])         # the same side
    assert rb.depends_on_recipe([x1, x1], [comp(0.01, 0.02), x10])    # any pair of the claim
    one_seed = comparisons.Comparison("a", "<", "b", "not judged (1 seed)")
    assert not rb.depends_on_recipe([one_seed], [x10])
    text = rb.arm_text("at scale small: not judged (x)", 10.0, True)
    assert text.startswith("the ×10 arm (variant-owned parameters at 10 × the lr, not the papers' one lr): ")
    assert text.endswith("not judged (x) — the verdict depends on the recipe")
    assert "depends" not in rb.arm_text("consistent at small", 10.0, False)


def test_a_reading_over_every_gpa_run_pools_the_papers_recipe_only():
    """small_long's x10 twins are another recipe: the bank readings (strength vs removal cost,
    layer-1 banks, ...) read the rows trained at x1 alone."""
    from kernattn.tracks.char.report import _papers_recipe

    rows = [row("gpa"), row("gpa_lr10", scale=10.0), row("rope", "softmax", {"position": "rope"})]
    runs = pd.DataFrame({"row": ["gpa", "gpa_lr10", "rope"], "n_variant_params": [512, 512, 0]})
    gpa = {"rows": [{"row": "gpa"}, {"row": "gpa_lr10"}], "figures": 1}
    assert _papers_recipe(gpa, rb.recipe_arm(rows, 1.0, runs)) == {"rows": [{"row": "gpa"}], "figures": 1}
    one_recipe = rb.recipe_arm(rows, 1.0, runs.iloc[[0, 2]])
    assert _papers_recipe(gpa, one_recipe) is gpa
