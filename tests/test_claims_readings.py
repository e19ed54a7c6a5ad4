"""gpa-long's readings of its corpus and trained banks as claims (issue 25), each rule of
tracks/char/report_readings.py on constructed analyses with a known answer."""

from __future__ import annotations

import pandas as pd
import pytest

from kernattn.report import verdicts
from kernattn.report.verdicts import studies
from kernattn.page import build
from kernattn.tracks.char import report_readings as rr


def _claim(cid: str) -> dict:
    return next(c for c in build.load_paper_numbers()["claims"] if c["id"] == cid)


def _gpa(runs: list[dict], corpus_peak: int | None = 68) -> dict:
    corpus = None if corpus_peak is None else {"peak": corpus_peak, "lines": {"peak": 67}, "paragraphs": {"median": 184}}
    return {"corpus": corpus, "rows": [{"row": "gpa_m64", "runs": [{"ok": True, "run_id": f"gpa_m64-s{i}",
                                                                      "bank_converged": True, "bank_gate": "", **r}
                                                                     for i, r in enumerate(runs)]}]}


def test_layer1_similarity_hand_computed():
    banks = pd.DataFrame({"lag": [0, 1, 2, 3], "L1H1": [0.0, 1, 2, 3], "L1H2": [0.0, 2, 4, 6], "L2H1": [5.0, 0, 5, 0]})
    got = rr.layer1_similarity(banks)
    # same shape (r = 1); strengths 3 and 6: sd (ddof 1) 2.1213 / mean 4.5
    assert got["correlation"] == pytest.approx(1.0) and got["spread"] == pytest.approx(2 ** 0.5 * 1.5 / 4.5)
    anti = banks.assign(L1H2=[3.0, 2, 1, 0])
    assert rr.layer1_similarity(anti)["correlation"] == pytest.approx(-1.0)
    assert rr.layer1_similarity(banks[["lag", "L1H1"]]) is None


def test_corpus_peak():
    claim = _claim("001-corpus-newline-peak")
    res = rr.corpus_peak(claim, _gpa([]), "tiny")
    assert res.verdict == verdicts.REPRODUCED and res.shown == "consistent at tiny" and res.ours == "lag 68"
    assert "line lengths peak at 67" in res.detail
    assert rr.corpus_peak(claim, _gpa([], 71), "paper").verdict == verdicts.CONTRADICTED  # 2 lags off
    assert rr.corpus_peak(claim, _gpa([], None), "paper").verdict == verdicts.NOT_RUN


def test_generated_peak():
    claim = _claim("001-generated-newline-peak")
    near = [{"gen_peak": 69, "gen_peak_ci": [67, 70]}, {"gen_peak": 68, "gen_peak_ci": [66, 69]}]
    assert rr.generated_peak(claim, _gpa(near), "paper", None).verdict == verdicts.REPRODUCED
    far = [{"gen_peak": 40, "gen_peak_ci": [38, 45]}, {"gen_peak": 90, "gen_peak_ci": [70, 95]}]
    assert rr.generated_peak(claim, _gpa(far), "paper", None).verdict == verdicts.CONTRADICTED
    mixed = [near[0], {"gen_peak": 80, "gen_peak_ci": [60, 90]}]  # off by 12, its interval reaches 68
    assert rr.generated_peak(claim, _gpa(mixed), "paper", None).verdict == verdicts.INCONCLUSIVE
    gate = verdicts.not_judged("not converged: gpa_m64-s0: val loss fell 0.1")
    assert rr.generated_peak(claim, _gpa(near), "paper", gate).verdict == gate
    none = {"corpus": {"peak": 68}, "rows": []}
    assert rr.generated_peak(claim, none, "paper", None).verdict == verdicts.NOT_RUN


def _heads(strengths: list[list[float]]) -> list[dict]:
    return [{"layer": layer + 1, "head": h + 1, "strength": s} for layer, row in enumerate(strengths)
            for h, s in enumerate(row)]


def test_last_layer_bank():
    claim = _claim("001-last-layer-bank-zero")
    weak = {"per_head": _heads([[1.0] * 4] * 3 + [[1.0, 0.05, 2.0, 1.5]])}
    strong = {"per_head": _heads([[1.0] * 4] * 4)}
    assert rr.last_layer_bank(claim, _gpa([weak, weak]), "paper", 4, 0.1).verdict == verdicts.REPRODUCED
    assert rr.last_layer_bank(claim, _gpa([strong, strong]), "paper", 4, 0.1).verdict == verdicts.CONTRADICTED
    assert rr.last_layer_bank(claim, _gpa([weak, strong]), "paper", 4, 0.1).verdict == verdicts.INCONCLUSIVE
    unsettled = _gpa([weak])
    unsettled["rows"][0]["runs"][0].update(bank_converged=False, bank_gate="bank log-parameters moved up to 0.25")
    assert rr.last_layer_bank(claim, unsettled, "paper", 4, 0.1).verdict.startswith(
        "not judged (not converged: gpa_m64-s0: bank log-parameters moved")
    two = {"per_head": _heads([[1.0] * 4, [0.01] * 4])}
    res = rr.last_layer_bank(claim, _gpa([two]), "tiny", 2, 0.1)
    assert res.verdict == "not comparable (our model has 2 layers; the claim reads the fourth)"


def test_layer1_banks():
    claim = _claim("001-layer1-banks-identical")
    same = {"layer1": {"correlation": 0.99, "spread": 0.1}}
    apart = {"layer1": {"correlation": 0.5, "spread": 0.1}}
    uneven = {"layer1": {"correlation": 0.99, "spread": 0.5}}
    assert rr.layer1_banks(claim, _gpa([same, same]), "paper").verdict == verdicts.REPRODUCED
    assert rr.layer1_banks(claim, _gpa([apart, uneven]), "paper").verdict == verdicts.CONTRADICTED
    assert rr.layer1_banks(claim, _gpa([same, apart]), "paper").verdict == verdicts.INCONCLUSIVE
    assert rr.layer1_banks(claim, _gpa([{"layer1": None}]), "paper").verdict.startswith("not judged")


def test_sign_test_hand_computed():
    # 6 of 6 positive: P(X >= 6) = 1/64; P(X <= 6) = 1
    assert studies.sign_test(6, 6) == pytest.approx((1 / 64, 1.0))
    # 1 of 5: P(X >= 1) = 31/32, P(X <= 1) = 6/32
    assert studies.sign_test(1, 5) == pytest.approx((31 / 32, 6 / 32))
    assert studies.sign_test(0, 0) == (1.0, 1.0)


def test_strength_cost_sign_test_over_runs():
    # the pooled reading, of a claim without `strata` (the shipped one reads per bank form:
    # tests/test_reviewer_readings.py)
    claim = {k: v for k, v in _claim("001-weak-bank-cheap-head").items() if k != "strata"}
    six = _gpa([{"rho": 0.5 + 0.01 * i} for i in range(6)])
    res = rr.strength_cost(claim, six, "paper")
    assert res.verdict == verdicts.REPRODUCED and res.ours.startswith("rho > 0 in 6 of 6 runs (p 0.0156)")
    neg = _gpa([{"rho": -0.4} for _ in range(7)])
    assert rr.strength_cost(claim, neg, "paper").verdict == verdicts.CONTRADICTED
    split = _gpa([{"rho": 0.4}] * 4 + [{"rho": -0.4}] * 3)
    assert rr.strength_cost(claim, split, "paper").verdict == verdicts.INCONCLUSIVE
    five = _gpa([{"rho": 0.9}] * 5)  # 1/32 > 2.5%: the test cannot pass with five runs
    assert rr.strength_cost(claim, five, "paper").verdict.startswith("not judged (5 runs with a converged bank")
    unsettled = _gpa([{"rho": 0.9}] * 7)
    unsettled["rows"][0]["runs"][0]["bank_converged"] = False  # left out: six votes remain
    res = rr.strength_cost(claim, unsettled, "tiny")
    assert res.shown == "consistent at tiny" and "left out (bank not converged or rho undefined): gpa_m64-s0" in res.detail
    assert rr.strength_cost(claim, {"rows": []}, "paper").verdict == verdicts.NOT_RUN


def test_shipped_readings_name_gpa_rows():
    from kernattn.config import load_params

    from .test_report import PARAMS

    rows = {r.name: r for r in load_params(PARAMS, "paper").matrix.rows}
    readings = [c for c in build.load_paper_numbers()["claims"] if c["kind"] in rr.KINDS]
    assert {c["kind"] for c in readings} == set(rr.KINDS)
    for c in readings:
        if "row" in c:
            assert rows[c["row"]].variant == "gpa" and rows[c["row"]].options.get("n_kernels", 64) == 64, c["id"]
