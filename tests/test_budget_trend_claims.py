"""The char claims at a scale with a budget sweep (issue 48), from run folders as the engine and
`kernattn cooldown` leave them (final.json of each branch, lr.npy of every run and branch):
report_claims.judge reads each compared gap across the sweep (report.budget_trend), the papers'
recipe (the x1 twins) giving the verdict and the x10 rows' printed after it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from kernattn.config import load_params
from kernattn.page import build
from kernattn.report import verdicts
from kernattn.report.verdicts import budget_trend
from kernattn.tracks.char import report_claims
from kernattn.tracks.char.stages import budget_dir, run_dir
from kernattn.tracks.char.track import lr_at

from .test_report import PARAMS

L900 = 2.39715   # the small schedule's learning-rate sum at 900 steps (tests/test_budget_trend.py)


def rope_loss(n: int, seed: int) -> float:
    return 2.0 - 0.1 * n / 800 + 0.002 * (seed - 2)


def gaps_of(row: str, lrs: float, seed: int) -> float:
    """gpa_dp_m8 (x10) beats RoPE early and reverses near 900 steps; its x1 twin is worse throughout."""
    jitter = 1e-3 * ((seed * 3 + round(lrs * 100)) % 5 - 2)
    if row == "gpa_dp_m8":
        return 0.028 - 0.028 * L900 / lrs + jitter
    return 0.05 + jitter if row == "gpa_dp_m8_lr1" else 0.0


def write_sweep(p, rows_seeds: dict[str, range]) -> pd.DataFrame:
    """Every run's final.json (branches) and lr.npy (runs and branches); the runs table."""
    recs = []
    for row, seeds in rows_seeds.items():
        for s in seeds:
            rid = f"{row}-s{s}"
            for n, folder in ((800, run_dir(p, rid)), *((b, budget_dir(p, rid, b)) for b in (200, 400))):
                rates = np.array([lr_at(t, p.train, n) for t in range(n)])
                folder.mkdir(parents=True)
                np.save(folder / "lr.npy", rates)
                loss = rope_loss(n, s) + gaps_of(row, float(rates.sum()), s)
                (folder / "final.json").write_text(json.dumps({"val_loss": loss}))
                if n == 800:
                    recs.append({"run_id": rid, "row": row, "seed": s, "val_loss": loss, "best_val_loss": loss,
                                 "n_variant_params": 0 if row == "rope" else 256})
    return pd.DataFrame(recs)


@pytest.fixture
def small(tmp_path):
    p = load_params(PARAMS, "small")
    return dataclasses.replace(p, train=dataclasses.replace(p.train, out_dir=str(tmp_path / "runs")))


def _claim(cid: str) -> dict:
    return next(c for c in build.load_paper_numbers()["claims"] if c["id"] == cid)


def test_a_swept_claim_reads_the_x1_twins_and_prints_the_x10_arm_after(small):
    runs = write_sweep(small, {"rope": range(5), "gpa_dp_m8": range(5), "gpa_dp_m8_lr1": range(3)})
    res, = report_claims.judge([_claim("000-gpa-beats-rope")], small, runs, build.load_paper_numbers())
    assert res.verdict == verdicts.CONTRADICTED and res.comparisons[0].a == "gpa_dp_m8_lr1"
    assert res.comparisons[0].trend.n_seeds == 3                      # the twins' 3 seeds, paired with RoPE's
    assert res.shown == ("inconsistent at small; the ×10 arm (variant-owned parameters at 10 × the lr, not the papers' "
                         "one lr): at scale small: reverses with budget (crosses near 900 steps; a + b/L over "
                         "200–800 steps) — the verdict depends on the recipe")
    assert res.interval.endswith("the gap read across the budget sweep as a + b/L")
    assert "a + b/L over 200–800 steps: a (the limit) +0.05" in res.detail
    assert "limit a +0.05" in res.ours and res.estimate == pytest.approx(0.05, abs=2e-3)


def test_a_swept_claim_without_the_records_of_its_rates_is_not_judged(small):
    runs = write_sweep(small, {"rope": range(3), "gpa_dp_m8": range(3), "gpa_dp_m8_lr1": range(3)})
    (budget_dir(small, "rope-s1", 400) / "lr.npy").unlink()
    res, = report_claims.judge([_claim("000-gpa-beats-rope")], small, runs, build.load_paper_numbers())
    assert res.verdict.startswith("not judged (budget sweep: rope-s1-b400 has no lr.npy")
    assert res.comparisons[0].family_size == 1 and isinstance(res.comparisons[0].trend, budget_trend.Trend)
