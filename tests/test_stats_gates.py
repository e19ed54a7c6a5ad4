"""The verdict rules of issue 25 on constructed data with known answers: zero spread, too few
seeds, families (Holm over a figure, not a row), one-sided 2.5% tests that agree with the
printed 95% interval, the minimum detectable effect, the NoPE-anchored margin, and the gates."""

from __future__ import annotations


import math

import numpy as np
import pytest

from kernattn.report import bootstrap, stats, verdicts
from kernattn.report.verdicts import comparisons, gates

from .test_report import PARAMS

T975_DF2 = 4.302653   # t_{0.975, 2}
T80_DF2 = 1.060660    # t_{0.80, 2}


def test_zero_spread_is_not_estimable_never_p_zero():
    # equal per-seed differences (paired) and equal values (Welch): no standard error, no interval
    a, b = [2.0, 2.1, 2.2], [1.9, 2.0, 2.1]
    for paired in (True, False):
        ci = stats.diff_ci(a if paired else [2.0, 2.0, 2.0], b if paired else [1.9, 1.9, 1.9], paired)
        assert not ci.estimable and ci.p_two_sided() is None and math.isnan(ci.lo) and math.isnan(ci.hi)
        comp = comparisons.compare_less("a", a, "b", b, paired=paired) if paired else \
            comparisons.compare_less("a", [2.0] * 3, "b", [1.9] * 3)
        assert comp.verdict == verdicts.NOT_ESTIMABLE and comp.p is None and comp.p_holm is None and comp.mde is None
    # rounding noise in the 16th digit is zero spread too (1.8 - 1.9 vs 1.81 - 1.91)
    assert comparisons.compare_less("a", [1.8, 1.81, 1.79], "b", [1.9, 1.91, 1.89], paired=True).verdict == verdicts.NOT_ESTIMABLE
    assert verdicts.combine([verdicts.REPRODUCED, verdicts.NOT_ESTIMABLE]) == verdicts.NOT_ESTIMABLE


def test_fewer_than_three_seeds_is_not_judged_even_with_a_clear_interval():
    a, b = [1.0, 2.0], [3.0, 4.1]  # differences -2.0, -2.1: the 95% interval (df 1) lies below 0
    ci = stats.paired_diff_ci(a, b)
    assert ci.hi < 0
    comp = comparisons.compare_less("a", a, "b", b, paired=True)
    assert comp.verdict == "not judged (2 seeds)" and comp.ci == ci
    assert comp.p_holm is None and comp.family_size == 1   # withheld, it still counts in its family (issue 48)
    assert comparisons.compare_less("a", [1.0], "b", [2.0, 3.0]).verdict == "not judged (1 seed)"
    assert verdicts.combine(["not judged (2 seeds)", verdicts.INCONCLUSIVE]) == "not judged (2 seeds)"
    assert verdicts.combine(["not judged (2 seeds)", verdicts.CONTRADICTED]) == verdicts.CONTRADICTED


def _pair_with_p(p: float, sign: float) -> tuple[list[float], list[float]]:
    """Rows a, b over 3 seeds whose paired t test of a - b has two-sided p-value p (df 2)."""
    from scipy.stats import t

    e = 0.01
    m = sign * t.isf(p / 2, 2) * e / math.sqrt(3)
    b = [2.0, 3.0, 4.0]
    return [x + m + d for x, d in zip(b, (-e, 0.0, e))], b


def test_a_family_is_the_figure_not_the_row():
    """Two comparisons at p = 0.03 and 0.04: alone each is called (p < 0.05); as one family
    (one figure) Holm compares 0.03 with 0.05/2 and stops: both inconclusive."""
    a, b = _pair_with_p(0.03, -1)
    c, d = _pair_with_p(0.04, -1)
    alone = [comparisons.judge_family([comparisons.Test("a", a, "b", b, True)])[0],
             comparisons.judge_family([comparisons.Test("c", c, "d", d, True)])[0]]
    assert [x.verdict for x in alone] == [verdicts.REPRODUCED, verdicts.REPRODUCED]
    family = comparisons.judge_family([comparisons.Test("a", a, "b", b, True), comparisons.Test("c", c, "d", d, True)])
    assert [x.verdict for x in family] == [verdicts.INCONCLUSIVE, verdicts.INCONCLUSIVE]
    assert [x.p_holm for x in family] == [pytest.approx(0.06), pytest.approx(0.06)]
    assert {x.family_size for x in family} == {2}
    # a gated comparison is not tested, but it stays in the family (issue 48: until 2026-12-02 it
    # left it, so k shrank by exactly the comparisons a gate held back and p = 0.03 passed alone)
    gated = comparisons.judge_family([comparisons.Test("a", a, "b", b, True),
                                comparisons.Test("c", c, "d", d, True, gate=verdicts.not_judged("converged: x"))])
    assert gated[0].verdict == verdicts.INCONCLUSIVE and gated[0].family_size == 2
    assert gated[0].p_holm == pytest.approx(0.06) and gated[0].holm_level == pytest.approx(1 - 0.05 / 2)
    assert gated[1].verdict == "not judged (converged: x)" and gated[1].p_holm is None


def test_one_sided_at_2_5_percent_agrees_with_the_printed_interval():
    """Non-inferiority at a margin between the one-sided 95% and 97.5% upper bounds: the old
    rule (one-sided 95%) called it reproduced while the printed 95% interval crossed the
    margin; now the verdict and the interval agree. Then, on random data, reproduced exactly
    when the two-sided interval lies below the margin (a family of one)."""
    a, b = [1.01, 2.02, 3.03], [1.0, 2.0, 3.0]   # differences 0.01, 0.02, 0.03: se 0.01/sqrt(3), df 2
    se = 0.01 / math.sqrt(3)
    margin = 0.02 + 3.5 * se                      # t_{0.95,2} = 2.92 < 3.5 < t_{0.975,2} = 4.30
    comp = comparisons.compare_noninferior("a", a, "b", b, margin=margin, paired=True)
    assert comp.ci.hi > margin and comp.verdict == verdicts.INCONCLUSIVE
    rng = np.random.default_rng(0)
    for _ in range(200):
        x, y = rng.normal(0, 1, 4), rng.normal(0.3, 1, 4)
        less = comparisons.compare_less("x", x, "y", y, paired=True)
        assert (less.verdict == verdicts.REPRODUCED) == (less.ci.hi < 0)
        assert (less.verdict == verdicts.CONTRADICTED) == (less.ci.lo > 0)
        ni = comparisons.compare_noninferior("x", x, "y", y, margin=0.5, paired=True)
        assert (ni.verdict == verdicts.REPRODUCED) == (ni.ci.hi < 0.5)
        assert (ni.verdict == verdicts.CONTRADICTED) == (ni.ci.lo > 0.5)


def test_minimum_detectable_effect_hand_computed():
    a, b = [1.01, 2.02, 3.03], [1.0, 2.0, 3.0]    # se = 0.01 / sqrt(3), df 2
    se = 0.01 / math.sqrt(3)
    comp = comparisons.compare_less("a", a, "b", b, paired=True)
    assert comp.mde == pytest.approx((T975_DF2 + T80_DF2) * se, rel=1e-5)
    from scipy.stats import t

    # in a family of 3 the test runs at 0.025 / 3 one-sided: a larger MDE
    three = comparisons.judge_family([comparisons.Test("a", a, "b", b, True)] * 3)
    assert three[0].mde == pytest.approx((t.ppf(1 - 0.025 / 3, 2) + T80_DF2) * se, rel=1e-6)
    assert three[0].mde > comp.mde


def test_noninferiority_margin_is_a_fraction_of_the_nope_rope_gap():
    nope, rope = [2.20, 2.21, 2.19], [2.000, 2.002, 1.998]   # gap 0.2 (differences 0.2, 0.208, 0.192)
    margin, why = comparisons.noninferiority_margin(0.5, nope, rope, paired=True)
    assert margin == pytest.approx(0.1) and "NoPE − RoPE" in why
    # RoPE no better than NoPE at this scale: no margin, and the reason
    margin, why = comparisons.noninferiority_margin(0.5, [2.0, 2.01, 1.99], [2.0, 1.99, 2.01], paired=True)
    assert margin is None and "gains nothing" in why
    # two seeds: a gap of 0.25 whose 95% interval (df 1) still reaches 0 is no established gain
    margin, why = comparisons.noninferiority_margin(0.5, [2.2, 2.3], [2.0, 2.0], paired=True)
    assert margin is None and "+0.2500" in why
    with pytest.raises(ValueError):
        comparisons.noninferiority_margin(1.5, nope, rope, paired=True)


def test_loss_gate_on_constructed_curves():
    steps = list(range(0, 101, 10))
    falling = [3.0 - 0.001 * s for s in steps]        # drop over the last 20%: 0.001 x 20 = 0.02
    g = gates.loss_converged(steps, falling, 0.2, 0.01)
    assert not g.passed and "fell 0.0200" in g.why
    flat = [3.0 - 0.0001 * s for s in steps]          # 0.002
    assert gates.loss_converged(steps, flat, 0.2, 0.01).passed
    rising = [3.0 + 0.001 * s for s in steps]         # overfitting is not "still falling"
    assert gates.loss_converged(steps, rising, 0.2, 0.01).passed
    few = gates.loss_converged([0, 50, 100], [3.0, 2.0, 1.0], 0.2, 0.01)
    assert not few.passed and "1 val loss evaluation(s)" in few.why
    assert gates.withheld([few]) == f"not judged (not converged: {few.why})"
    assert gates.withheld([gates.gate("premise not met", True)]) is None
    assert gates.apply(verdicts.REPRODUCED, [gates.gate("premise not met", False, "no weak bank")]) == \
        "not judged (premise not met: no weak bank)"


# the gate on a comparison's gap: tests/test_reviewer_gap.py (gates.gap_stable, issue 37)


def test_parameter_travel_gate():
    # tiny char schedule of the science notes: banks moving 0.21-0.29 against a limit of about 0.27
    lrs = [2e-3] * 100 + [1e-3] * 70
    travel = gates.adam_travel(lrs)
    assert travel == pytest.approx(0.27)
    assert not gates.params_converged([0.21, -0.29], travel, 0.5, "bank log-parameters").passed
    ok = gates.params_converged([0.02, -0.08], travel, 0.5, "bank log-parameters")
    assert ok.passed and "30%" in ok.why
    assert not gates.params_converged([], travel, 0.5, "bank").passed
    with pytest.raises(ValueError):
        gates.thresholds({"gates": {"last_fraction": 0.2}})


def _write_trace(run_dir, steps, values, names=("blocks.0.attn.bank.log_tau",), sizes=None):
    """A param_trace.npz as kernattn.engine.trace writes it."""
    values = np.asarray(values, dtype=float).reshape(len(steps), -1)
    run_dir.mkdir(parents=True, exist_ok=True)
    np.savez(run_dir / "param_trace.npz", steps=np.asarray(steps), values=values, names=np.asarray(names),
             sizes=np.asarray(sizes or [values.shape[1]]))


def _write_rates(run_dir, tp):
    """lr.npy as the engine writes it for a char run of train params `tp` (tests/test_budgets.py)."""
    from kernattn.tracks.char.track import lr_at

    run_dir.mkdir(parents=True, exist_ok=True)
    np.save(run_dir / "lr.npy", np.asarray([lr_at(s, tp) for s in range(tp.max_steps)]))


def test_bank_gate_reads_kernels_against_the_schedule(tmp_path):
    """A bank read from analyze-gpa's kernels.csv: at its init every change is 0 (not travelling);
    with tau moved by the whole of Adam's travel (tiny schedule: about 0.23 at 210 steps; 0.27 at
    the 250 steps of the science notes) not. Then its trace over the last 20% of training (steps
    168-210, where the cosine lets Adam move a parameter by sum of 2e-4 + 9e-4 (1 + cos(pi (s -
    30) / 180)) over s = 168..209 = 0.01181): none recorded; a change of 0.004 (34%: passes at
    50%); a change of 0.008 (68%: fails)."""
    import pandas as pd

    from kernattn.config import load_params
    from kernattn.tracks.char import report_bankgate

    p = load_params(PARAMS, "tiny", {"train": {"max_steps": 210, "warmup_steps": 30}})  # tiny's schedule until 2026-12
    th = gates.Thresholds(last_fraction=0.2, max_loss_drop=0.01, max_param_travel=0.5)
    options = {"n_kernels": 4, "kernel": "decay_periodic", "combine": "mult"}
    tau0 = np.linspace(4.0, 192.0, 4)
    at_init = pd.DataFrame({"layer": 1, "head": 1, "kernel": [1, 2, 3, 4], "sigma": 1.0, "length": 150.0,
                            "alpha": 1.0, "tau": tau0})
    run = tmp_path / "gpa-s0"
    g = report_bankgate.bank_gate(at_init, options, p.train, th, run)
    assert not g.passed and "gpa-s0 has no lr.npy" in g.why and "--fresh" in g.why
    _write_rates(run, p.train)
    travel = report_bankgate.adam_travel(run, p.train)
    assert travel == pytest.approx(0.229, abs=2e-3)  # 2e-3 x 15.5 warm-up + 180 x 1.1e-3 cosine
    g = report_bankgate.bank_gate(at_init, options, p.train, th, run)
    assert not g.passed and "no gpa-s0/param_trace.npz" in g.why and "--fresh" in g.why  # travel passed
    steps = [0, 42, 84, 126, 168, 189, 210]  # the last 20% of 210 steps: 168, 189, 210
    _write_trace(run, steps, [[0.0, 0.0], [0.1, 0.0], [0.2, 0.0], [0.3, 0.0], [0.40, 0.0], [0.402, 0.0], [0.404, 0.0]])
    g = report_bankgate.bank_gate(at_init, options, p.train, th, run)
    assert g.passed and "moved up to 0.000" in g.why and "changed by up to 0.004" in g.why, g.why
    assert "steps 168-210" in g.why and "34% of Adam's travel limit 0.012 there" in g.why
    _write_trace(run, steps, [[0.0, 0.0]] * 4 + [[0.40, 0.0], [0.404, 0.0], [0.408, 0.0]])
    g = report_bankgate.bank_gate(at_init, options, p.train, th, run)
    assert not g.passed and "changed by up to 0.008" in g.why and "68% of Adam's travel limit" in g.why
    travelled = at_init.assign(tau=tau0 * np.exp(-0.26))
    g = report_bankgate.bank_gate(travelled, options, p.train, th, run)
    assert not g.passed and "moved up to 0.260" in g.why
    assert not report_bankgate.bank_gate(at_init.iloc[:0], options, p.train, th, run).passed


def test_params_settled_reads_the_change_over_the_tail(tmp_path):
    """Hand-computed: steps 0..100 by 10 at lr 0.01 a step, the tail of 20% from step 80 (Adam
    can move a parameter 20 x 0.01 = 0.2 there); the change between the first traced point of
    the tail and the last, largest over the parameters (signs ignored), against half of that;
    fewer than 2 points in the tail, nothing recorded, no learning rate: not judged. run_settled
    keeps the parameters a name selects, and says so when none has that name."""
    steps, lrs = list(range(0, 101, 10)), [0.01] * 100
    vals = np.zeros((11, 2))
    vals[:, 0] = np.linspace(0, 1, 11)   # moves 0.2 between step 80 and 100: all of Adam's travel
    vals[8:, 1] = [0.0, 0.01, -0.015]    # moves 0.015: 8%
    g = gates.params_settled(steps, vals, lrs, 0.2, 0.5, "p")
    assert not g.passed and "changed by up to 0.200" in g.why and "100% of Adam's travel limit 0.200" in g.why
    assert "steps 80-100" in g.why
    assert gates.params_settled(steps, vals[:, 1:], lrs, 0.2, 0.5, "p").passed
    assert "1 p record(s) in the last 20%" in gates.params_settled([0, 50, 100], vals[:3], lrs, 0.2, 0.5, "p").why
    assert not gates.params_settled([], np.zeros((0, 1)), lrs, 0.2, 0.5, "p").passed
    assert "no learning rate known" in gates.params_settled(steps, vals, [0.0] * 100, 0.2, 0.5, "p").why
    th = gates.Thresholds(0.2, 0.01, 0.5)
    _write_trace(tmp_path, steps, vals, names=("a.log_tau", "b.log_sigma"), sizes=[1, 1])
    assert not gates.run_settled(tmp_path, th, "all", lrs).passed
    assert gates.run_settled(tmp_path, th, "log sigma", lrs, names=("log_sigma",)).passed
    none = gates.run_settled(tmp_path, th, "x", lrs, names=("log_length",))
    assert not none.passed and "holds no parameter named *log_length" in none.why
    assert "learning rates known only to step 50, the p to step 100" in gates.params_settled(
        steps, vals, [0.01] * 50, 0.2, 0.5, "p").why


def test_bootstrap_mde_by_hand():
    """A 95% interval [-1, 1]: se = 1 / 1.95996; MDE = (1.95996 + 0.84162) x se = 1.42941. At 99%
    (a Bonferroni level) the same interval is narrower in se: (2.57583 + 0.84162) / 2.57583 = 1.32674."""
    assert bootstrap.BootCI(0.0, -1.0, 1.0, 10, 100).mde() == pytest.approx(1.42941, abs=1e-5)
    assert bootstrap.BootCI(0.0, -1.0, 1.0, 10, 100, level=0.99).mde() == pytest.approx(1.32674, abs=1e-5)
