"""The budget sweep's gate and the recipe arm's mapping (tracks.char.report_budgets, issue 37) on
constructed data with known answers."""

from types import SimpleNamespace

import pandas as pd
import pytest

from kernattn.report import stats
from kernattn.tracks.char import report_budgets as rb

BUDGETS = [200, 400, 800]


def values(gaps_a_minus_b, seeds=range(5)):
    """Rows a and b with the gap a - b at each budget, the same for every seed (+ a seed's jitter)."""
    out = {"a": {}, "b": {}}
    for budget, gap in zip(BUDGETS, gaps_a_minus_b):
        out["b"][budget] = {s: 2.0 - budget / 1e4 for s in seeds}
        out["a"][budget] = {s: 2.0 - budget / 1e4 + gap + 1e-4 * s for s in seeds}
    return out


def test_a_gap_that_holds_its_sign_and_size_passes():
    g = rb.budget_gate("a", "b", values([-0.02, -0.025, -0.03]), BUDGETS, 0.1)
    assert g.passed and "same sign, not shrinking" in g.why and "800: -0.0298" in g.why


def test_a_sign_that_flips_with_the_budget_fails():
    """The headline of issue 37: worse than RoPE at the short budget, better at the long one."""
    g = rb.budget_gate("a", "b", values([+0.26, +0.05, -0.03]), BUDGETS, 0.1)
    assert not g.passed and g.why.endswith("its sign changes with the budget")
    assert stats.is_withheld(rb.gates.withheld([g]))


def test_a_gap_shrinking_with_the_budget_fails_and_a_small_wobble_does_not():
    g = rb.budget_gate("a", "b", values([-0.04, -0.03, -0.02]), BUDGETS, 0.1)
    assert not g.passed and "shrinks from budget 200 to 400 by more than 10% of itself" in g.why
    assert rb.budget_gate("a", "b", values([-0.030, -0.028, -0.031]), BUDGETS, 0.1).passed   # within 10%


def test_a_missing_budget_run_is_named_and_no_sweep_is_no_gate():
    v = values([-0.02, -0.025, -0.03])
    del v["b"][400]
    g = rb.budget_gate("a", "b", v, BUDGETS, 0.1)
    assert not g.passed and g.why == "no finished run of b at budget 400 (kernattn cooldown)"
    assert rb.budget_gate("a", "b", v, [800], 0.1) is None


def test_max_shrink_is_read_and_checked():
    assert rb.max_shrink({"budget_sweep": {"max_shrink": 0.1}}) == 0.1
    with pytest.raises(ValueError, match="budget_sweep needs a number max_shrink"):
        rb.max_shrink({})
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\)"):
        rb.max_shrink({"budget_sweep": {"max_shrink": 1.0}})


def row(name, variant="gpa", options=None, scale=None):
    return SimpleNamespace(name=name, variant=variant, options=options or {"n_kernels": 8}, variant_lr_scale=scale)


def test_recipe_arm_maps_rows_with_their_own_parameters_to_their_twins():
    rows = [row("rope", "softmax", {"position": "rope"}), row("gpa"), row("gpa_lr1", scale=1.0),
            row("lrope", "softmax", {"position": "learned_rope"})]
    runs = pd.DataFrame({"row": ["rope", "gpa", "gpa_lr1", "lrope"], "n_variant_params": [0, 512, 512, 32]})
    arm = rb.recipe_arm(rows, 10.0, runs)
    # rope has nothing the factor speeds up: itself; gpa: its twin; learned RoPE: no twin here
    assert arm == {"rope": "rope", "gpa": "gpa_lr1", "gpa_lr1": "gpa_lr1", "lrope": None}
    assert rb.recipe_arm(rows, 1.0, runs.iloc[:2]) is None   # every trained row at 1 x: no arm


def test_arm_text_says_when_the_verdict_depends_on_the_recipe():
    flip = rb.arm_text("consistent at small", "inconsistent at small", 10.0)
    assert flip.endswith("inconsistent at small — the verdict depends on the recipe") and "×10" in flip
    same = rb.arm_text("consistent at small", "consistent at small", 10.0)
    assert "depends" not in same
    assert "depends" in rb.arm_text("consistent at small", "at scale small: inconclusive", 10.0)
