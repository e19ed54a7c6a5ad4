"""Issue 37, item 5 ("the margins cannot discriminate"), on constructed data with known answers:
the non-inferiority margin from the conservative end of the NoPE - RoPE interval, the prune
study's own relative margin, the intervals a Holm verdict is read at, and the floor below which
a spread is not resolved."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from kernattn.report import stats, verdicts
from kernattn.report.verdicts import comparisons
from kernattn.report.claims import fmt_comp_diff, margin_rule, pairs_frame
from kernattn.report.part import ReportError

SEEDS = 5
ROPE = [2.00, 2.02, 1.98, 2.01, 1.99]          # a seed effect both rows share (paired by seed)
JITTER = [0.0, 0.004, -0.004, 0.002, -0.002]    # small per-seed spread of a difference


def shifted(base: list[float], gap: float, jitter: list[float] = JITTER) -> list[float]:
    return [x + gap + j for x, j in zip(base, jitter)]


NOPE = shifted(ROPE, 0.6, [0.0, 0.01, -0.01, 0.005, -0.005])   # RoPE gains 0.6 over no positions


def paired_t(a: list[float], b: list[float]) -> tuple[float, float, int]:
    """Mean, standard error and df of the per-seed differences, by hand."""
    d = np.asarray(a) - np.asarray(b)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), d.size - 1


# ----------------------------------------------------------------------------- the margin's end
def test_the_lower_end_margin_is_a_fraction_of_the_least_established_gain():
    mean, se, df = paired_t(NOPE, ROPE)
    lower = mean - student_t.ppf(0.975, df) * se
    margin, why = comparisons.noninferiority_margin(0.1, NOPE, ROPE, paired=True, end="lower")
    assert margin == pytest.approx(0.1 * lower)
    assert why == f"0.1 × lower end of NoPE − RoPE 95% interval ({lower:.4f}; estimate {mean:.4f})"
    point, point_why = comparisons.noninferiority_margin(0.1, NOPE, ROPE, paired=True)
    assert point == pytest.approx(0.1 * mean) and "point estimate" in point_why
    assert margin < point  # the conservative end never widens the margin
    # a noisier reference with the same mean gives a narrower margin, not a wider one
    noisy = shifted(ROPE, 0.6, [0.0, 0.1, -0.1, 0.05, -0.05])
    assert comparisons.noninferiority_margin(0.1, noisy, ROPE, paired=True, end="lower")[0] < margin
    # no established gain (its interval reaches 0): no margin, whichever end
    flat = shifted(ROPE, 0.01, [0.0, 0.05, -0.05, 0.03, -0.03])
    assert comparisons.noninferiority_margin(0.1, flat, ROPE, paired=True, end="lower")[0] is None
    with pytest.raises(ValueError):
        comparisons.noninferiority_margin(0.1, NOPE, ROPE, paired=True, end="upper")


def _bank_as_rope(row: list[float], margin: float) -> comparisons.Comparison:
    return comparisons.compare_noninferior("gpa", row, "rope", ROPE, margin=margin, paired=True)


def test_a_row_quarter_nat_worse_than_rope_is_not_as_well_as():
    """The reviewer's case: NoPE 0.6 worse than RoPE, 5 paired seeds, small spread. Half the
    point estimate (0.30, the old rule) let a row 0.25 worse pass; a tenth of the lower end
    (about 0.059) calls it what it is."""
    worse = shifted(ROPE, 0.25)
    old, _ = comparisons.noninferiority_margin(0.5, NOPE, ROPE, paired=True)
    assert old == pytest.approx(0.3, abs=1e-3)
    assert _bank_as_rope(worse, old).verdict == verdicts.REPRODUCED   # the bug the margin fixes
    margin, _ = comparisons.noninferiority_margin(0.1, NOPE, ROPE, paired=True, end="lower")
    assert 0.05 < margin < 0.06
    verdict = _bank_as_rope(worse, margin).verdict
    assert verdict != verdicts.REPRODUCED and verdict == verdicts.CONTRADICTED


def test_a_row_slightly_better_than_rope_passes():
    margin, _ = comparisons.noninferiority_margin(0.1, NOPE, ROPE, paired=True, end="lower")
    better = shifted(ROPE, -0.01)
    comp = _bank_as_rope(better, margin)
    assert comp.verdict == verdicts.REPRODUCED and comp.ci.hi < margin
    # equal to RoPE within the spread: also inside the margin
    assert _bank_as_rope(shifted(ROPE, 0.0), margin).verdict == verdicts.REPRODUCED


def test_the_char_claim_reads_its_margin_at_the_lower_end():
    """The char track's claim machinery: `end: lower` in the claim, the why-text on the row."""
    from kernattn.tracks.char import report_claims as rc

    values = {"rope": dict(enumerate(ROPE)), "no_pos": dict(enumerate(NOPE)),
              "gpa_m64": dict(enumerate(shifted(ROPE, 0.25)))}
    st = rc.Setting(judged="final", values=values, other=values, curves=None, thresholds=None,
                    missing_note=lambda name: f"{name} missing", scale="small", other_name="best loss")
    claim = {"id": "001-fig2-bank-as-rope", "kind": "noninferior", "rows": ["gpa_m64", "rope"],
             "margin": {"fraction": 0.1, "of": ["no_pos", "rope"], "end": "lower"}}
    margin, why = rc._margin(claim, st)
    mean, se, df = paired_t(NOPE, ROPE)
    lower = mean - student_t.ppf(0.975, df) * se
    assert margin == pytest.approx(0.1 * lower)
    assert why == (f"margin {0.1 * lower:.4f} = 0.1 × lower end of NoPE − RoPE 95% interval "
                   f"({lower:.4f}; estimate {mean:.4f})")
    res = rc._judge_comparisons([claim], st)[claim["id"]]
    assert res.verdict == verdicts.CONTRADICTED and "lower end of NoPE − RoPE" in res.detail


# ----------------------------------------------------------------------------- the config
def test_a_margin_rule_that_is_no_known_form_is_one_line_naming_the_file_and_key():
    assert margin_rule({"margin": 0.02}) == {"number": 0.02}
    assert margin_rule({"margin": {"fraction": 0.1, "of": ["no_pos", "rope"], "end": "lower"}}) == {
        "fraction": 0.1, "of": ["no_pos", "rope"], "end": "lower"}
    assert margin_rule({"margin": {"fraction": 0.5, "of": ["no_pos", "rope"]}})["end"] is None
    assert margin_rule({"margin": {"relative": 0.01}}, ("number", "relative", "fraction")) == {"relative": 0.01}
    for bad in ({"percent": 1}, {"relative": 0.01}, {"fraction": 1.5, "of": ["a", "b"]},
                {"fraction": 0.1, "of": ["a", "b"], "end": "upper"}, -0.1, "0.02", None):
        with pytest.raises(ReportError) as exc:
            margin_rule({"id": "x-claim", "margin": bad})
        msg = str(exc.value)
        assert "\n" not in msg and "paper_numbers.yaml" in msg and "'margin'" in msg and "x-claim" in msg
    with pytest.raises(ReportError, match="relative"):
        margin_rule({"id": "p", "margin": {"relative": 2}}, ("number", "relative", "fraction"))


def test_the_shipped_margins_are_the_pre_registered_ones():
    from kernattn.page.build import load_paper_numbers

    claims = {c["id"]: c for c in load_paper_numbers()["claims"]}
    assert margin_rule(claims["001-fig2-bank-as-rope"]) == {"fraction": 0.1, "of": ["no_pos", "rope"], "end": "lower"}
    assert margin_rule(claims["001-weak-head-removable"], ("number", "relative", "fraction")) == {"relative": 0.01}


# ----------------------------------------------------------------------------- the prune study's margin
def _pruned(seed: int, control: float, cost: float, row: str = "gpa_m64") -> dict:
    """A pruned run whose removal costs `cost` both before and after fine-tuning."""
    return {"run_id": f"{row}-s{seed}", "row": row, "seed": seed, "premise_met": True, "premise_why": "constructed",
            "weakest_strength": 0.01, "strength": [0.01], "loss_before": control + 0.1,
            "loss_after_removal": control + 0.1 + cost, "loss_after_fine_tune": control + cost,
            "loss_control_fine_tune": control, "params_saved_fraction": 0.01, "flops_saved_fraction": 0.02}


def test_the_prune_margin_is_relative_to_the_unpruned_reference():
    """Controls 1.50, 1.52, 1.51 (mean 1.51): margin 0.01 x 1.51 = 0.0151 nats/char. A removal
    costing ~0.002 passes; one costing ~0.03 (2% of the loss) is contradicted, where the old
    half-of-NoPE - RoPE margin (0.30 at small) let a cost of 0.25 through."""
    from kernattn.studies.prune.report import _prune_claim, prune_context, prune_margin

    claim = {"id": "001-weak-head-removable", "margin": {"relative": 0.01}}
    rule, why = prune_margin(claim, params=None)   # a relative margin needs no char runs
    assert rule == {"relative": 0.01} and "unpruned reference" in why
    controls = (1.50, 1.52, 1.51)
    cheap = [_pruned(s, c, 0.002 + 0.0005 * s) for s, c in enumerate(controls)]
    part = prune_context({"threshold": 0.1, "runs": cheap}, rule) | {"margin_why": why}
    arch = part["architectures"][0]
    assert arch["margin"] == pytest.approx(0.0151)
    assert arch["margin_why"] == ("margin 0.0151 = 0.01 × gpa_m64's unpruned reference (control fine-tuned without "
                                  "removal) validation loss 1.5100, mean of 3 seeds")
    assert part["margin"] == "0.01 × each architecture's unpruned reference loss: gpa_m64 0.0151"
    res = _prune_claim(claim, part, "small")
    assert res.verdict == verdicts.REPRODUCED and arch["margin_why"] in res.detail
    costly = [_pruned(s, c, 0.03 + 0.0005 * s) for s, c in enumerate(controls)]
    res = _prune_claim(claim, prune_context({"threshold": 0.1, "runs": costly}, rule) | {"margin_why": why}, "small")
    assert res.verdict == verdicts.CONTRADICTED
    # each architecture its own reference
    other = [_pruned(s, 2.0, 0.002, row="gpa_dp_m8") for s in range(3)]
    two = prune_context({"threshold": 0.1, "runs": cheap + other}, rule)
    assert [a["margin"] for a in two["architectures"]] == [pytest.approx(0.0151), pytest.approx(0.02)]


def test_a_prune_margin_of_no_known_form_is_rejected():
    from kernattn.studies.prune.report import prune_margin

    with pytest.raises(ReportError, match=r"paper_numbers\.yaml: claim 001-weak-head-removable: key 'margin'"):
        prune_margin({"id": "001-weak-head-removable", "margin": {"half_of": ["no_pos", "rope"]}}, params=None)
    assert prune_margin({"id": "p", "margin": 0.02}, params=None) == (0.02, "margin 0.0200 (fixed)")


# ----------------------------------------------------------------------------- Holm step intervals
def _with_p(p: float, se: float = 0.01, base: float = 2.0) -> tuple[list[float], list[float]]:
    """Three paired seeds whose differences have standard error `se` and two-sided p `p`
    (df 2): differences m + s x (-1, 0, 1), s = se sqrt(3), m = t_{1 - p/2, 2} se."""
    m = float(student_t.ppf(1 - p / 2, 2)) * se
    s = se * math.sqrt(3)
    b = [base, base + 0.1, base - 0.1]
    return [x + m + s * k for x, k in zip(b, (-1, 0, 1))], b


def _test(name: str, p: float) -> comparisons.Test:
    a, b = _with_p(p)
    return comparisons.Test(name, a, f"{name}-ref", b, paired=True)


def test_holm_step_intervals_by_hand():
    """p-values 0.04, 0.001, 0.02 (given in that order): sorted 0.001 < 0.05/3, 0.02 < 0.05/2,
    0.04 < 0.05/1, all rejected. Their intervals are at 1 - 0.05/3, 1 - 0.05/2 and 0.95:
    diff -+ t_{1 - alpha'/2, 2} x 0.01."""
    ps = (0.04, 0.001, 0.02)
    tests = [_test(f"a{i}", p) for i, p in enumerate(ps)]
    comps = comparisons.judge_family(tests)
    assert [c.p for c in comps] == [pytest.approx(p, rel=1e-6) for p in ps]
    assert [c.holm_step for c in comps] == [3, 1, 2]
    for c, alpha in zip(comps, (0.05, 0.05 / 3, 0.05 / 2)):
        q = student_t.ppf(1 - alpha / 2, 2) * 0.01
        assert c.holm_level == pytest.approx(1 - alpha)
        assert (c.holm_lo, c.holm_hi) == (pytest.approx(c.ci.diff - q), pytest.approx(c.ci.diff + q))
        assert c.verdict == verdicts.CONTRADICTED and c.holm_lo > 0 and c.holm_reached
    # the smallest p's step interval is wider than its 95% one; the last step's is the 95% one
    assert comps[1].holm_lo < comps[1].ci.lo and comps[0].holm_lo == pytest.approx(comps[0].ci.lo)
    assert fmt_comp_diff(comps[1]).endswith("(98.33%, Holm step 1 of 3)")


def test_a_test_after_holm_stops_prints_an_interval_that_agrees_with_its_verdict():
    """p-values 0.001, 0.03, 0.04: 0.001 < 0.05/3 rejected; 0.03 >= 0.05/2, Holm stops at step
    2; 0.04 is never reached. Alone its 95% interval lies clear of 0 (p < 0.05), yet it is
    inconclusive: the printed interval is the stopping step's (97.5%), which contains 0."""
    tests = [_test(f"a{i}", p) for i, p in enumerate((0.001, 0.03, 0.04))]
    first, stopped, after = comparisons.judge_family(tests)
    assert first.verdict == verdicts.CONTRADICTED
    assert stopped.verdict == after.verdict == verdicts.INCONCLUSIVE
    assert after.ci.lo > 0                                   # the 95% interval alone would disagree
    assert (stopped.holm_step, stopped.holm_stop, after.holm_step, after.holm_stop) == (2, None, 3, 2)
    assert after.holm_level == pytest.approx(1 - 0.05 / 2) and after.holm_lo < 0 < after.holm_hi
    assert stopped.holm_lo < 0 < stopped.holm_hi
    text = fmt_comp_diff(after)
    assert "97.50%" in text and "Holm stopped at an earlier test, step 2" in text
    frame = pairs_frame([type("R", (), {"claim": {"id": "c"}, "comparisons": [after], "scale": "small", "regime": "",
                                        "shown": "x"})()])
    assert frame.loc[0, "holm_lo"] == pytest.approx(after.holm_lo) and frame.loc[0, "ci_lo"] > 0


def test_printed_interval_and_verdict_always_agree_in_a_family():
    """Random families of 2-6 comparisons, orderings and non-inferiority mixed: for every
    tested comparison the interval its verdict is read at leaves out the boundary exactly when
    it is reproduced or contradicted, on the verdict's side."""
    rng = np.random.default_rng(37)
    checked = 0
    for _ in range(300):
        tests = []
        for j in range(int(rng.integers(2, 7))):
            b = list(2.0 + rng.normal(0, 0.05, 4))
            a = list(np.asarray(b) + rng.normal(0, 0.02) + rng.normal(0, 0.01, 4))  # an effect, seed noise
            tests.append(comparisons.Test(f"a{j}", a, f"b{j}", b, paired=True,
                                    margin=0.02 if rng.random() < 0.3 else None))
        for t, c in zip(tests, comparisons.judge_family(tests)):
            if c.holm_level is None:
                continue
            outside = not (c.holm_lo <= t.boundary <= c.holm_hi)
            assert outside == (c.verdict in (verdicts.REPRODUCED, verdicts.CONTRADICTED)), c
            if c.verdict == verdicts.REPRODUCED:
                assert c.holm_hi < t.boundary
            if c.verdict == verdicts.CONTRADICTED:
                assert c.holm_lo > t.boundary
            checked += 1
    assert checked > 500


def test_the_char_claims_print_the_holm_interval_and_say_so():
    from kernattn.tracks.char import report_claims as rc

    values = {name: dict(enumerate(v)) for name, v in (
        ("rope", ROPE), ("no_pos", NOPE), ("gpa_m64", shifted(ROPE, -0.03)),
        ("gpa_m64_rope", shifted(ROPE, -0.06, [0.003, -0.001, 0.0, 0.002, -0.004])))}
    st = rc.Setting(judged="final", values=values, other=values, curves=None, thresholds=None,
                    missing_note=lambda name: f"{name} missing", scale="small", other_name="best loss")
    order = {"id": "fig2-order", "kind": "order", "family": "fig2", "order": ["gpa_m64_rope", ["gpa_m64", "rope"]]}
    ni = {"id": "fig2-ni", "kind": "noninferior", "family": "fig2", "rows": ["gpa_m64", "rope"],
          "margin": {"fraction": 0.1, "of": ["no_pos", "rope"], "end": "lower"}}
    out = rc._judge_comparisons([order, ni], st)
    res = out["fig2-ni"]
    comp = res.comparisons[0]
    assert comp.family_size == 3 and comp.holm_level is not None and comp.holm_level > 0.95
    assert (res.lo, res.hi) == (pytest.approx(comp.holm_lo), pytest.approx(comp.holm_hi))
    assert f"[{comp.holm_lo:+.4f}, {comp.holm_hi:+.4f}] ({comp.holm_level:.2%}, Holm step" in res.ours
    assert "intervals at each test's Holm step level" in res.interval
    assert "intervals at each test's Holm step level" in out["fig2-order"].interval


# ----------------------------------------------------------------------------- the resolution floor
def test_a_spread_below_the_resolution_is_not_estimable():
    """Per-seed differences that agree to 1e-12 of their size (and to 1e-8 nats) are rounding,
    not seeds: "variance not estimable", where the purely relative floor tested them (p ~ 1e-9
    and smaller)."""
    b = [2.0, 2.1, 1.9]
    for spread in (3e-12, 1e-8):
        a = [x + 0.3 + spread * k for x, k in zip(b, (-1, 0, 1))]
        mean, se, df = paired_t(a, b)
        assert se > 1e-12 * max(1.0, abs(mean))           # the old floor let it through ...
        assert 2 * student_t.sf(abs(mean) / se, df) < 1e-9  # ... with a p no run can have
        ci = stats.paired_diff_ci(a, b)
        assert not ci.estimable and ci.p_two_sided() is None and math.isnan(ci.lo)
        assert comparisons.compare_less("b", b, "a", a, paired=True).verdict == verdicts.NOT_ESTIMABLE
        assert not stats.welch_diff_ci([0.3 + spread * k for k in (-1, 0, 1)], [0.0] * 3).estimable
    # rows equal to within float32 rounding (difference 1e-7, se 2.9e-7 nats): no difference is measured
    tiny = stats.paired_diff_ci([x + 1e-7 + 5e-7 * k for x, k in zip(b, (-1, 0, 1))], b)
    assert not tiny.estimable
    # a spread of 1e-4 nats is a real one (se 5.8e-5, above the floor): tested
    real = stats.paired_diff_ci([x + 0.3 + 1e-4 * k for x, k in zip(b, (-1, 0, 1))], b)
    assert real.estimable and real.p_two_sided() > 0
    assert stats.RESOLUTION == 1e-6
