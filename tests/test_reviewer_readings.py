"""Seed 001's readings under the rules of issue 37, on constructed analyses with known answers:
strength against removal cost read per bank form, and the layer-1 bump at the newline peak + 1."""

from __future__ import annotations

from kernattn.report import stats
from kernattn.tracks.char import report_readings as rr

from .test_claims_readings import _claim, _gpa


def _forms(mult: list[float], add: list[float]) -> dict:
    """Two GPA rows, one per bank form, with each run's Spearman rho."""
    def row(name, form, rhos):
        return {"row": name, "combine": form, "runs": [{"ok": True, "run_id": f"{name}-s{i}", "bank_converged": True,
                                                        "bank_gate": "", "rho": r} for i, r in enumerate(rhos)]}
    return {"corpus": None, "rows": [row("gpa_dp_m8", "mult", mult), row("gpa_m64", "add", add)]}


def test_the_split_weak_bank_data_are_read_per_form():
    """The 2026-11-27 small runs: rho > 0 in 10 of 10 multiplicative runs, < 0 in 10 of 10
    additive runs. Pooled that is 10 of 20 (inconclusive); per form, two perfect, opposite
    effects: the paper's additive model contradicts the reading."""
    data = _forms([0.5 + 0.01 * i for i in range(10)], [-0.5 - 0.01 * i for i in range(10)])
    res = rr.strength_cost(_claim("001-weak-bank-cheap-head"), data, "small")
    assert res.verdict == stats.CONTRADICTED
    assert "multiplicative (span of log G): rho > 0 in 10 of 10 runs (p 0.000977), consistent at small" in res.ours
    assert "additive (span of G): rho > 0 in 0 of 10 runs (p 1), inconsistent at small" in res.ours
    assert "pre-registered on 2026-11-28 after the split was seen post hoc on the 2026-11-27 small runs" in res.detail
    pooled = {k: v for k, v in _claim("001-weak-bank-cheap-head").items() if k != "strata"}
    assert rr.strength_cost(pooled, data, "small").verdict == stats.INCONCLUSIVE   # what the pooled test said


def test_per_form_each_test_needs_its_own_six_runs():
    data = _forms([0.5] * 6, [0.5] * 5)
    res = rr.strength_cost(_claim("001-weak-bank-cheap-head"), data, "paper")
    assert res.verdict.startswith("not judged (5 runs")   # the additive form cannot reach 2.5%
    assert "multiplicative (span of log G): rho > 0 in 6 of 6 runs (p 0.0156), reproduced" in res.ours


def test_layer1_bump_at_the_newline_peak_plus_one():
    claim = _claim("001-layer1-bump-lag70")
    at = [{"bumps_l1": [{"lag": 69}, {"lag": 70}, {"lag": 68}, {"lag": 69}]} for _ in range(3)]
    res = rr.layer1_bump(claim, _gpa(at), "paper")     # corpus peak 68: the target is lag 69
    assert res.verdict == stats.REPRODUCED and res.ours.startswith("mean layer-1 bump lag 69.0 against 69")
    far = [{"bumps_l1": [{"lag": 105}, {"lag": 106}, {"lag": 104}, {"lag": 107}]} for _ in range(3)]
    assert rr.layer1_bump(claim, _gpa(far), "small").shown == "inconsistent at small"
    mixed = [at[0], far[0], {"bumps_l1": [{"lag": 69}, None, {"lag": 69}, {"lag": 69}]}]
    assert rr.layer1_bump(claim, _gpa(mixed), "paper").verdict == stats.INCONCLUSIVE   # a head without a bump
    moving = _gpa(at)
    moving["rows"][0]["runs"][1].update(bank_converged=False, bank_gate="moved 90% of Adam's travel")
    assert rr.layer1_bump(claim, moving, "paper").verdict.startswith("not judged (not converged: gpa_m64-s1")
    assert rr.layer1_bump(claim, _gpa(at, corpus_peak=None), "paper").verdict == stats.NOT_RUN
