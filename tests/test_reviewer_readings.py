"""Readings under the rules of issue 37, on constructed data with known answers: strength
against removal cost read per bank form, the layer-1 bump at the newline peak + 1, and the
length a "trains stably" record needs (stability.min_steps, min_seeds)."""

from __future__ import annotations

import json

import pytest

from kernattn.report import verdicts
from kernattn.report.verdicts import stability
from kernattn.page import build
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
    assert res.verdict == verdicts.CONTRADICTED
    assert "multiplicative (span of log G): rho > 0 in 10 of 10 runs (p 0.000977), consistent at small" in res.ours
    assert "additive (span of G): rho > 0 in 0 of 10 runs (p 1), inconsistent at small" in res.ours
    assert "pre-registered on 2026-11-28 after the split was seen post hoc on the 2026-11-27 small runs" in res.detail
    pooled = {k: v for k, v in _claim("001-weak-bank-cheap-head").items() if k != "strata"}
    assert rr.strength_cost(pooled, data, "small").verdict == verdicts.INCONCLUSIVE   # what the pooled test said


def test_per_form_each_test_needs_its_own_six_runs():
    data = _forms([0.5] * 6, [0.5] * 5)
    res = rr.strength_cost(_claim("001-weak-bank-cheap-head"), data, "paper")
    assert res.verdict.startswith("not judged (5 runs")   # the additive form cannot reach 2.5%
    assert "multiplicative (span of log G): rho > 0 in 6 of 6 runs (p 0.0156), reproduced" in res.ours


def test_layer1_bump_at_the_newline_peak_plus_one():
    claim = _claim("001-layer1-bump-lag70")
    at = [{"bumps_l1": [{"lag": 69}, {"lag": 70}, {"lag": 68}, {"lag": 69}]} for _ in range(3)]
    res = rr.layer1_bump(claim, _gpa(at), "paper")     # corpus peak 68: the target is lag 69
    assert res.verdict == verdicts.REPRODUCED and res.ours.startswith("mean layer-1 bump lag 69.0 against 69")
    far = [{"bumps_l1": [{"lag": 105}, {"lag": 106}, {"lag": 104}, {"lag": 107}]} for _ in range(3)]
    found = (True, "positive control found")   # the wrap study's planted period was found at this size
    assert rr.layer1_bump(claim, _gpa(far), "small", found).shown == "inconsistent at small"
    mixed = [at[0], far[0], {"bumps_l1": [{"lag": 69}, None, {"lag": 69}, {"lag": 69}]}]
    assert rr.layer1_bump(claim, _gpa(mixed), "paper", found).verdict == verdicts.INCONCLUSIVE   # a head without a bump
    moving = _gpa(at)
    moving["rows"][0]["runs"][1].update(bank_converged=False, bank_gate="moved 90% of Adam's travel")
    assert rr.layer1_bump(claim, moving, "paper").verdict.startswith("not judged (not converged: gpa_m64-s1")
    assert rr.layer1_bump(claim, _gpa(at, corpus_peak=None), "paper").verdict == verdicts.NOT_RUN


def test_a_bump_away_from_the_peak_needs_the_positive_control():
    """Issue 48: at small the bump sat at lag 106 against 69 ("inconsistent"), yet the wrap study's
    planted period was not found at this size: the method had not been shown to find a bump that
    is there, so a bump elsewhere is no evidence: not judged. A bump at the peak needs no control."""
    claim = _claim("001-layer1-bump-lag70")
    far = _gpa([{"bumps_l1": [{"lag": 105}, {"lag": 106}, {"lag": 104}, {"lag": 107}]} for _ in range(3)])
    lost = (False, "bump 106.3 vs newline peak 68 (tolerance 2); moved from initialisation by -18.7; positive "
                   "control not found")
    res = rr.layer1_bump(claim, far, "small", lost)
    assert res.verdict == ("not judged (positive control not found at this size: bump 106.3 vs newline peak 68 "
                           "(tolerance 2); moved from initialisation by -18.7; positive control not found)")
    assert rr.layer1_bump(claim, far, "small").verdict.startswith("not judged (positive control not run at this scale")
    at = _gpa([{"bumps_l1": [{"lag": 69}, {"lag": 70}, {"lag": 68}, {"lag": 69}]} for _ in range(3)])
    assert rr.layer1_bump(claim, at, "paper", lost).verdict == verdicts.REPRODUCED


def test_the_positive_control_is_read_from_the_wrap_studys_summary(tmp_path):
    from types import SimpleNamespace

    params = SimpleNamespace(scale="small", studies=SimpleNamespace(out_dir=str(tmp_path)))
    assert rr.wrap_control(params, "gpa_m64") is None                    # the study has not run here
    (tmp_path / "wrap").mkdir()
    row = {"row": "gpa_m64", "premise_why": "bump 106.3 vs newline peak 68; positive control not found",
           "controls": [{"corpus": "planted_40", "verdict": "inconclusive"}]}
    (tmp_path / "wrap" / "summary.json").write_text(json.dumps({"scale": "small", "rows": [row]}))
    assert rr.wrap_control(params, "gpa_m64") == (False, row["premise_why"])
    row["controls"][0]["verdict"] = "the bump tracks the line width"
    (tmp_path / "wrap" / "summary.json").write_text(json.dumps({"scale": "small", "rows": [row]}))
    assert rr.wrap_control(params, "gpa_m64")[0] is True
    assert rr.wrap_control(params, "gpa_dp_m8") is None                  # a row the study does not read
    assert rr.wrap_control(SimpleNamespace(scale="tiny", studies=params.studies), "gpa_m64") is None


# ----------------------------------------------------------------------------- stability's length
def _write(path, lines: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def _micro_lm(i: int) -> list[dict]:
    """metrics.jsonl as the micro LM writes it: 4 steps, a train line at each, val at 0, 2 and 4."""
    train = [{"step": s, "split": "train", "loss": 5.99 - 0.001 * s, "lr": 3.1e-4, "tokens": 128 * s}
             for s in range(1, 5)]
    val = [{"step": s, "split": "val", "loss": 5.99 - 0.001 * s + 0.0001 * i, "tokens": 128 * s} for s in (0, 2, 4)]
    return sorted(val + train, key=lambda x: (x["step"], x["split"] == "val"))


def _micro_vit() -> list[dict]:
    """metrics.jsonl as the micro ViT writes it: one epoch of 96 images in batches of 32, 3 steps."""
    return [{"step": 0, "split": "val", "epoch": 0, "top1": 9.4, "loss": 2.30},
            {"step": 1, "split": "train", "epoch": 0, "loss": 2.318, "lr": 1e-3},
            {"step": 2, "split": "train", "epoch": 0, "loss": 2.302, "lr": 7.5e-4},
            {"step": 3, "split": "train", "epoch": 0, "loss": 2.350, "lr": 2.5e-4},
            {"step": 3, "split": "val", "epoch": 1, "top1": 6.3, "loss": 2.33}]


def test_the_micro_stability_rows_read_from_their_files_are_too_short(tmp_path):
    """003-lm-stable and 003-vit-stable read "consistent at small" on 2026-11-27 from these
    records; under the pre-registered length they are not judged."""
    rule = stability.rule(build.load_paper_numbers())
    lm = [(rid, stability.read_record(_write(tmp_path / rid / "metrics.jsonl", _micro_lm(i))))
          for i, rid in enumerate(("gka_tokens-s0", "gka_flops-s0"))]
    vit = [("gka-s0", stability.read_record(_write(tmp_path / "vit" / "metrics.jsonl", _micro_vit())))]
    got_lm = stability.judge(_claim("003-lm-stable"), lm, rule, "small")
    got_vit = stability.judge(_claim("003-vit-stable"), vit, rule, "small")
    for got, steps in ((got_lm, 4), (got_vit, 3)):
        assert got.verdict.startswith("not judged (too short") and f"trained {steps} steps, 100 needed" in got.verdict
        assert got.shown.startswith("at scale small: not judged (too short")   # never "consistent at small"
    assert "(and 1 more run)" in got_lm.verdict


def _falling(steps: int, every: int = 10) -> stability.TrainRecord:
    at = tuple(range(every, steps + 1, every))
    return stability.TrainRecord(at, tuple(3.0 - 1.0 * s / steps for s in at))


def test_a_long_enough_stable_record_is_judged_and_a_short_one_is_not():
    rule = stability.rule(build.load_paper_numbers())
    assert (rule.min_steps, rule.min_seeds) == (100, 3)   # the pre-registered numbers
    claim = _claim("003-char-stable")
    three = [(f"gka-s{s}", _falling(200)) for s in range(3)]
    ok = stability.judge(claim, three, rule, "paper")
    assert ok.verdict == verdicts.REPRODUCED and ok.ours.startswith("3 of 3 GKA runs stable")
    two = stability.judge(claim, three[:2], rule, "paper")
    assert two.verdict == "not judged (too short: 2 seeds of gka, 3 needed)"
    # each row needs its seeds: a second GKA row of one seed is too short even beside a full one
    other = three + [("gka_sqrt_d-s0", _falling(200))]
    got = stability.judge(claim, other, rule, "paper")
    assert got.verdict == "not judged (too short: 1 seed of gka_sqrt_d, 3 needed)"
    short = three[:2] + [("gka-s2", _falling(90))]
    got = stability.judge(claim, short, rule, "paper")
    assert got.verdict == "not judged (too short: gka-s2 trained 90 steps, 100 needed)"
    # a spike in a long enough record still contradicts
    spiky = _falling(200)
    spiky = stability.TrainRecord(spiky.steps, spiky.losses[:10] + (9.0,) + spiky.losses[11:])
    bad = stability.judge(claim, three[:2] + [("gka-s2", spiky)], rule, "paper")
    assert bad.verdict == verdicts.CONTRADICTED and "gka-s2: train loss 9.0000 at step 110" in bad.detail


def test_a_divergence_contradicts_at_any_length():
    """A run cut off by its divergence ends early: "too short" would hide the divergence."""
    rule = stability.rule(build.load_paper_numbers())
    broke = stability.TrainRecord((10, 20, 30), (3.0, 2.9, 2.8), "loss is nan at step 35")
    got = stability.judge(_claim("003-char-stable"), [("gka-s0", broke)], rule, "paper")
    assert got.verdict == verdicts.CONTRADICTED and "gka-s0: diverged (loss is nan at step 35)" in got.detail


@pytest.mark.parametrize("bad, match", [
    ({"min_steps": 100}, "stability needs numbers spike_factor, skip_fraction, min_steps and min_seeds"),
    ({"min_steps": 0, "min_seeds": 3}, "stability.min_steps and min_seeds must be at least 1; got 0 and 3"),
    ({"min_steps": "many", "min_seeds": 3}, "stability needs numbers"),
])
def test_the_length_rule_is_read_from_the_yaml_in_one_line(bad, match):
    with pytest.raises(ValueError, match=match) as err:
        stability.rule({"stability": {"spike_factor": 1.5, "skip_fraction": 0.1, **bad}})
    assert "\n" not in str(err.value)


def test_a_claim_without_strata_keeps_the_pooled_reading_and_one_form_alone_is_judged():
    claim = _claim("001-weak-bank-cheap-head")
    pooled = {k: v for k, v in claim.items() if k != "strata"}
    data = _forms([0.5] * 6, [0.4] * 6)
    res = rr.strength_cost(pooled, data, "paper")
    assert res.verdict == verdicts.REPRODUCED and res.ours.startswith("rho > 0 in 12 of 12 runs")
    # a scale that trains one form only: that form's test is the claim's (the other has no run)
    only_add = {"corpus": None, "rows": [data["rows"][1]]}
    res = rr.strength_cost(claim, only_add, "paper")
    assert res.verdict == verdicts.REPRODUCED and "multiplicative: no run" in res.ours
