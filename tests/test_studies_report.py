"""Issue 17: the report's study sections and summary rows, on constructed study results with
hand-computed intervals and known verdicts; and the verdict rules on their own."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernattn.tracks.char.analysis import bumpshift
from kernattn.cli import main
from kernattn.config import load_params
from kernattn.report import stats
from kernattn.studies import summary_path

from .test_report import PNG, T975, check_summary_and_outline, parse, write_params, write_runs

T95_ONE_SIDED_1 = 6.313752  # t_{0.95, 1}


# ----------------------------------------------------------------------------- the rules
def test_reading_verdict_maps_the_two_outcomes():
    assert stats.reading_verdict(bumpshift.STAYS, bumpshift.STAYS, bumpshift.TRACKS) == stats.REPRODUCED
    assert stats.reading_verdict(bumpshift.TRACKS, bumpshift.STAYS, bumpshift.TRACKS) == stats.CONTRADICTED
    assert stats.reading_verdict(bumpshift.INCONCLUSIVE, bumpshift.STAYS, bumpshift.TRACKS) == stats.INCONCLUSIVE


def test_init_comparisons_hand_computed():
    """Differences from sigma = 1 of -0.1, -0.2, -0.15: mean -0.15, sd 0.05, se 0.05 / sqrt 3,
    t = 5.196 on 2 df, p = 0.0351: alone below 0.05, so some init beats 1; beside a second init
    whose test is not significant, Holm compares 0.0351 with 0.05 / 2 and nothing is rejected."""
    base = {0: 2.0, 1: 2.1, 2: 2.2}
    better = {0: 1.9, 1: 1.9, 2: 2.05}
    same = {0: 2.0, 1: 2.2, 2: 2.1}
    verdict, comps = stats.init_comparisons("1", {"1": base, "sqrt_d": better})
    assert verdict == stats.REPRODUCED
    (c,) = comps
    half = T975[2] * 0.05 / math.sqrt(3)
    assert c.ci.diff == pytest.approx(-0.15) and c.ci.half == pytest.approx(half, rel=1e-6)
    assert c.p == pytest.approx(0.03510, abs=5e-5)
    verdict, comps = stats.init_comparisons("1", {"1": base, "sqrt_d": better, "median": same})
    assert verdict == stats.INCONCLUSIVE
    assert [x.verdict for x in comps] == [stats.INCONCLUSIVE, stats.INCONCLUSIVE]
    assert comps[0].p_holm == pytest.approx(2 * comps[0].p)
    # every other init significantly worse: contradicted; one seed: no interval
    worse = {s: v + 0.3 + 0.01 * s for s, v in base.items()}
    assert stats.init_comparisons("1", {"1": base, "sqrt_d": worse})[0] == stats.CONTRADICTED
    assert stats.init_comparisons("1", {"1": {0: 2.0}, "sqrt_d": {0: 1.0}})[0] == stats.ONE_SEED
    assert stats.init_comparisons("1", {"1": base})[0] == stats.NOT_RUN


def test_init_comparisons_across_tracks_are_one_holm_family():
    """char: the differences above (p = 0.0351); vision (top-1 error): -5, -4, -3 (mean -4, sd 1,
    t = 6.928 on 2 df, p = 0.0202); LM: no difference. Each alone is significant at 0.05; as one
    family of three Holm compares 0.0202 with 0.05 / 3 and rejects nothing; without the LM,
    0.0202 < 0.05 / 2 and 0.0351 < 0.05: both rejected."""
    char = ("1", {"1": {0: 2.0, 1: 2.1, 2: 2.2}, "sqrt_d": {0: 1.9, 1: 1.9, 2: 2.05}})
    vision = ("1", {"1": {0: 30.0, 1: 28.0, 2: 29.0}, "sqrt_d": {0: 25.0, 1: 24.0, 2: 26.0}})
    lm = ("1", {"1": {0: 3.0, 1: 3.2, 2: 3.1}, "sqrt_d": {0: 3.0, 1: 3.1, 2: 3.2}})
    verdict, comps = stats.init_family_comparisons({"char": char, "lm": lm, "vision": vision})
    assert [(c.a, c.b) for c in comps] == [("char: sqrt_d", "char: 1"), ("lm: sqrt_d", "lm: 1"),
                                           ("vision: sqrt_d", "vision: 1")]
    assert comps[2].p == pytest.approx(0.0202, abs=1e-4) and comps[2].p_holm == pytest.approx(3 * comps[2].p)
    assert verdict == stats.INCONCLUSIVE and stats.REPRODUCED not in [c.verdict for c in comps]
    verdict, comps = stats.init_family_comparisons({"char": char, "vision": vision})
    assert verdict == stats.REPRODUCED and [c.verdict for c in comps] == [stats.REPRODUCED] * 2


# ----------------------------------------------------------------------------- constructed studies
def wrap_summary(scale: str) -> dict:
    """One row: the bump moves from 69/71 to 50/52 when the line peak moves from 68 to 49:
    shift -19 exactly (zero spread): it tracks the line width."""
    corpora = [bumpshift.CorpusBumps("original", 68, {0: 69.0, 1: 71.0}),
               bumpshift.CorpusBumps("rewrapped", 49, {0: 50.0, 1: 52.0}),
               bumpshift.CorpusBumps("unwrapped", None, {0: 70.0, 1: None})]
    row = {"row": "gpa_m64", **bumpshift.study_verdict(corpora, "original", 2.0)}
    peak = {"sharp": 68, "peak": 68, "contrast": 16.0, "line_peak": 67, "paragraph_median": 184.0}
    return {"study": "wrap", "scale": scale, "width": 50, "tol": 2.0, "reference": "original",
            "corpora": ["original", "rewrapped", "unwrapped"],
            "peaks": {"original": peak, "rewrapped": {**peak, "sharp": 49, "peak": 49, "line_peak": 48},
                      "unwrapped": {**peak, "sharp": None, "peak": 300, "contrast": 1.5}},
            "rows": [row], "bumps": [], "rows_not_trained": [], "verdict": row["verdict"]}


def gka_run(init: str, seed: int, loss: float) -> dict:
    curve = [{"step": 0, "sigma": [[1.0, 1.0]]}, {"step": 100, "sigma": [[1.5, 2.0]]}]
    return {"run_id": f"gka-init_{init}-s{seed}", "row": "gka", "init": init, "init_sigma": init, "seed": seed,
            "val_loss": loss, "steps": 100, "d_head": 32, "sigma_curve": curve, "sigma_end": [[1.5, 2.0]],
            "diag_start": [[0.99, 0.97]], "diag_end": [[0.5, 0.3]], "grad_log_sigma_start": [1e-6],
            "grad_w_o_start": [1e-2]}


def track_gka_run(track: str, init: str, seed: int, **metrics) -> dict:
    row = "gka_tokens" if track == "lm" else "gka"
    return {**gka_run(init, seed, metrics.pop("val_loss", 1.0)), "track": track, "row": row,
            "run_id": f"{track}_{row}-init_{init}-s{seed}", **metrics}


def prune_run(seed: int, tuned: float, control: float) -> dict:
    return {"run_id": f"gpa_m64-s{seed}", "row": "gpa_m64", "seed": seed, "removed": [{"layer": 2, "head": 3}],
            "flagged_weak": False, "strength": [0.5], "loss_before": 2.0, "loss_after_removal": 2.1 + 0.01 * seed,
            "loss_after_fine_tune": tuned, "loss_control_fine_tune": control,
            "cost_after_removal": 0.1 + 0.01 * seed, "cost_after_fine_tune": tuned - control,
            "zero_ablation": [0.1], "mean_ablation": [0.05], "params_saved": 1000, "params_saved_fraction": 0.01,
            "flops_saved_per_token": 2000.0, "flops_saved_fraction": 0.02, "fine_tune_steps": 100}


def write_studies(params) -> None:
    for study, doc in (
            ("wrap", wrap_summary(params.scale)),
            ("gka_init", {"study": "gka_init", "scale": params.scale, "inits": ["1", "sqrt_d"], "rows": ["char:gka"],
                          "runs": [gka_run("1", s, v) for s, v in enumerate((2.0, 2.1, 2.2))]
                          + [gka_run("sqrt_d", s, v) for s, v in enumerate((1.9, 1.9, 2.05))]}),
            ("prune", {"study": "prune", "scale": params.scale, "steps": 100, "k": 1, "threshold": 0.1,
                       "runs": [prune_run(0, 2.051, 2.05), prune_run(1, 2.043, 2.04)]})):
        path = summary_path(params, study)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))


def test_report_with_the_three_studies(tmp_path):
    params_path = write_params(tmp_path)
    write_runs(params_path)
    params = load_params(params_path)
    write_studies(params)
    assert main(["report", "--params", str(params_path)]) == 0
    folder = tmp_path / "report"
    html = (folder / "index.html").read_text()
    page = parse(folder / "index.html")
    assert page.verdicts["001-bump-paragraph-scale"] == "inconsistent at tiny"  # it tracks the width
    assert page.verdicts["003-gka-init-sigma"] == "consistent at tiny"
    # pruned - control: 0.001, 0.003 (mean 0.002, se 0.001): two seeds, df 1, below stats.MIN_SEEDS
    assert page.verdicts["001-weak-head-removable"] == "at scale tiny: not judged (2 seeds)"
    check_summary_and_outline(page, html, folder)
    import pandas as pd

    claims = pd.read_csv(folder / "tables" / "claims.csv").set_index("claim")
    assert claims.loc["003-gka-init-sigma", "estimate"] == pytest.approx(-0.15)
    assert claims.loc["003-gka-init-sigma", "ci_lo"] == pytest.approx(-0.15 - T975[2] * 0.05 / math.sqrt(3), rel=1e-6)
    prune = claims.loc["001-weak-head-removable"]
    assert prune["estimate"] == pytest.approx(0.002) and prune["ci_hi"] == pytest.approx(0.002 + T975[1] * 0.001)
    assert 0.002 + T95_ONE_SIDED_1 * 0.001 < 0.02
    wrap = claims.loc["001-bump-paragraph-scale"]
    assert (wrap["estimate"], wrap["ci_lo"], wrap["ci_hi"]) == (-19.0, -19.0, -19.0)
    assert "snakemake --cores all studies" not in html  # every study present: no "how to produce it"
    assert "is not well defined here" in html and "the head only" in html
    assert (folder / "assets" / "study-gka-sigma.png").read_bytes()[:8] == PNG
    for table in ("study-wrap-table", "study-gka-table", "study-prune-table"):
        assert page.tables[table], table
    assert [r["_attrs"].get("data-claim") for r in page.tables["summary-table"]][-3:] == [
        "001-bump-paragraph-scale", "003-gka-init-sigma", "001-weak-head-removable"]


def test_a_study_of_another_scale_is_not_shown(tmp_path):
    """A summary written at another scale (same folder) is not this scale's result."""
    params_path = write_params(tmp_path)
    write_runs(params_path)
    params = load_params(params_path)
    write_studies(params)
    doc = json.loads(Path(summary_path(params, "prune")).read_text())
    Path(summary_path(params, "prune")).write_text(json.dumps({**doc, "scale": "micro"}))
    assert main(["report", "--params", str(params_path)]) == 0
    page = parse(tmp_path / "report" / "index.html")
    assert page.verdicts["001-weak-head-removable"] == "at scale tiny: not run"
    assert page.verdicts["003-gka-init-sigma"] == "consistent at tiny"


def test_report_with_the_gka_init_study_of_three_tracks(tmp_path):
    """The constructed values of test_init_comparisons_across_tracks_are_one_holm_family as
    runs: a table per track (the ViT compared on its top-1 error), one Holm family, and every
    number of the tables in tables/study-gka-init.csv."""
    import pandas as pd

    params_path = write_params(tmp_path)
    write_runs(params_path)
    params = load_params(params_path)
    write_studies(params)
    runs = json.loads(summary_path(params, "gka_init").read_text())["runs"]
    runs = [{**r, "track": "char"} for r in runs]
    runs += [track_gka_run("lm", i, s, val_loss=v) for i, vals in (("1", (3.0, 3.2, 3.1)), ("sqrt_d", (3.0, 3.1, 3.2)))
             for s, v in enumerate(vals)]
    runs += [track_gka_run("vision", i, s, top1=t - 1, top1_ema=t) for i, vals in (("1", (70, 72, 71)), ("sqrt_d", (75, 76, 74)))
             for s, t in enumerate(vals)]
    summary_path(params, "gka_init").write_text(json.dumps(
        {"study": "gka_init", "scale": params.scale, "inits": ["1", "sqrt_d"], "runs": runs,
         "rows": ["char:gka", "lm:gka_tokens", "vision:gka"]}))
    assert main(["report", "--params", str(params_path)]) == 0
    folder = tmp_path / "report"
    page = parse(folder / "index.html")
    assert page.verdicts["003-gka-init-sigma"] == "at scale tiny: inconclusive"  # Holm across the three tracks
    for table in ("study-gka-table", "study-gka-table-lm", "study-gka-table-vision"):
        assert len(page.tables[table]) == 2, table
    csv = pd.read_csv(folder / "tables" / "study-gka-init.csv")
    assert list(zip(csv["track"], csv["init"].astype(str))) == [(t, i) for t in ("char", "lm", "vision") for i in ("1", "sqrt_d")]
    vision = csv[csv["track"] == "vision"].set_index(csv[csv["track"] == "vision"]["init"].astype(str))
    assert vision.loc["1", "value_mean"] == pytest.approx(29.0) and vision.loc["1", "top1_ema_mean"] == pytest.approx(71.0)
    assert vision.loc["sqrt_d", "diff_vs_baseline_mean"] == pytest.approx(-4.0)
    assert vision.loc["sqrt_d", "p_holm"] == pytest.approx(3 * 0.0202, abs=3e-4)
    assert "top-1 error" in csv[csv["track"] == "vision"]["metric"].iloc[0]
    claims = pd.read_csv(folder / "tables" / "claims.csv").set_index("claim")
    assert "vision: sqrt_d − 1" in claims.loc["003-gka-init-sigma", "ours"]
