"""The faults of issue 48, each on constructed data with a known answer: the loss gate read in a
wsd cooldown, the bank gate's travel limit for the x1 twins, "GKA trains stably" on the GKA-init
study's char runs, the GKA-init claim without a gap gate, the LM claims' stale reason, the
papers' recipe as the primary arm; and every gate both passes and fails on constructed data.
(The margin of a swept non-inferiority claim and unequal seeds: tests/test_reviewer_budgets.py
and test_reviewer_gap.py; Holm's k: test_stats_gates.py; the bump's positive control:
test_reviewer_readings.py; the wrap claim's words: test_studies_report.py.)"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from kernattn.report import verdicts
from kernattn.report.verdicts import budget_trend, gates

TH = gates.Thresholds(last_fraction=0.2, max_loss_drop=0.01, max_param_travel=0.5)
STEPS = list(range(0, 801, 40))


def wsd_curve(still_falling: float) -> list[float]:
    """A val loss under wsd (800 steps, cooldown from 640): falling by `still_falling` per 100
    steps before the cooldown, then 0.06 lower by the end (the annealing gain)."""
    return [2.0 - still_falling * s / 100 - (0.06 * (s - 640) / 160 if s > 640 else 0.0) for s in STEPS]


def test_the_loss_gate_reads_a_wsd_run_before_its_cooldown():
    """Fault 3a: the last 20% of a wsd run's steps is its cooldown, where the loss falls by the
    annealing gain (0.06 here) however settled the model is: read there, no run could pass."""
    plateau = wsd_curve(0.0005)
    assert not gates.loss_converged(STEPS, plateau, 0.2, 0.01).passed          # the old reading
    g = gates.loss_converged(STEPS, plateau, 0.2, 0.01, until=640)
    assert g.passed and "over the last 20% of training before its cooldown (step 640)" in g.why
    learning = gates.loss_converged(STEPS, wsd_curve(0.02), 0.2, 0.01, until=640)   # 0.026 over steps 512-640
    assert not learning.passed and "fell 0.0256" in learning.why


def test_the_char_convergence_gate_finds_the_cooldown_in_the_schedule():
    from kernattn.tracks.char import report_claims

    runs = pd.DataFrame({"row": ["gpa_m64"] * 2, "run_id": ["gpa_m64-s0", "gpa_m64-s1"]})
    curves = {rid: (STEPS, wsd_curve(0.0005)) for rid in runs["run_id"]}
    papers = {"gates": {"last_fraction": 0.2, "max_loss_drop": 0.01, "max_param_travel": 0.5,
                        "gap_tail_lr_fraction": 0.5, "gap_max_closing": 0.5}}
    wsd = SimpleNamespace(train=SimpleNamespace(schedule="wsd", max_steps=800, cooldown_fraction=0.2))
    assert report_claims.convergence(runs, curves, papers, wsd) == {"gpa_m64": None}
    assert report_claims.convergence(runs, curves, papers)["gpa_m64"].startswith("not judged (not converged: gpa_m64-s0")


def _bank_run(tmp_path, factor: float | None):
    """A char run of 100 steps at lr 0.01 (lr.npy), its final.json recording its own factor."""
    run = tmp_path / "gpa_m64_lr1-s0"
    run.mkdir()
    np.save(run / "lr.npy", np.full(100, 0.01))
    (run / "final.json").write_text(json.dumps({} if factor is None else {"variant_lr_scale": factor}))
    return run


def test_the_bank_gate_reads_each_runs_own_factor(tmp_path):
    """Fault 3c: a x1 twin's bank was read against train.variant_lr_scale (x10): a bank that used
    90% of its own travel (0.9 of 1.0) read as 9% of 10 and passed. Its own factor, from its
    final.json (or given), fails it; the x10 run itself is read at x10."""
    from kernattn.tracks.char import report_bankgate

    tp = SimpleNamespace(variant_lr_scale=10.0)
    run = _bank_run(tmp_path, 1.0)
    assert report_bankgate.adam_travel(run, tp) == pytest.approx(1.0)
    assert report_bankgate.adam_travel(run, tp, factor=10.0) == pytest.approx(10.0)
    options = {"n_kernels": 4, "kernel": "decay_periodic", "combine": "mult"}
    tau0 = np.linspace(4.0, 192.0, 4)
    kernels = pd.DataFrame({"layer": 1, "head": 1, "kernel": [1, 2, 3, 4], "sigma": 1.0, "length": 150.0,
                            "alpha": 1.0, "tau": tau0 * np.exp(-0.9)})
    g = report_bankgate.bank_gate(kernels, options, tp, TH, run)
    assert not g.passed and "90% of Adam's travel limit 1.000" in g.why
    fast = report_bankgate.bank_gate(kernels, options, tp, TH, run, factor=10.0)
    assert "param_trace.npz" in fast.why          # its travel (9% of 10) passed: the trace is read next
    (tmp_path / "old").mkdir()
    assert report_bankgate.run_factor(_bank_run(tmp_path / "old", None), tp) == 10.0   # no key recorded: train's


def _write_run(run, losses):
    """A finished run's metrics.jsonl (train lines every 10 steps of 200: 3 - step/100 +
    losses(step), with a seed-like jitter) and lr.npy (1e-3 a step)."""
    run.mkdir(parents=True)
    jitter = sum(map(ord, run.name)) % 5
    lines = [{"step": t, "split": "train", "loss": 3.0 - t / 100 + losses(t) + 1e-4 * ((jitter + t) % 5)}
             for t in range(10, 201, 10)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    np.save(run / "lr.npy", np.full(200, 1e-3))


def _study(tmp_path, gap_at):
    """The GKA-init study of 6 char seeds: sigma = 1 and sqrt_d runs whose train loss gap is gap_at(step)."""
    runs = []
    for init, gap in (("1", lambda t: 0.0), ("sqrt_d", gap_at)):
        for s in range(6):
            rid = f"gka-init_{init}-s{s}"
            _write_run(tmp_path / rid, gap)
            runs.append({"run_id": rid, "track": "char", "init": init, "seed": s, "row": "gka",
                         "val_loss": 1.0 + gap(200) + 1e-3 * s, "d_head": 16,
                         "sigma_curve": [{"step": 0, "sigma": [[1.0]]}], "sigma_end": [[1.0]], "diag_start": [[0.9]],
                         "diag_end": [[0.5]], "grad_log_sigma_start": [1.0], "grad_w_o_start": [1.0]})
    return {"runs": runs}


def test_the_gka_init_claim_passes_the_gap_gate_every_comparison_passes(tmp_path):
    """Fault 4 (a double standard): 003-gka-init-sigma read "supported" with no gap gate. A
    sqrt(d) init whose advantage closes (-0.1 at step 10 to -0.01 at 200) is not judged; one
    that holds (-0.03 throughout) is supported."""
    from kernattn.studies.gka_init import report as gr

    closing = _study(tmp_path / "a", lambda t: -0.1 + 0.09 * t / 200)
    part = gr.gka_context(closing, "sqrt_d") | {"gap_gates": gr.init_gap_gates(tmp_path / "a", closing, "sqrt_d",
                                                                                TH, 0.01)}
    res = gr._gka_claim({"id": "003-gka-init-sigma", "inits": {}}, part, "small")
    assert res.verdict.startswith("not judged (gap not stable at this budget: char: sqrt_d − 1 ")
    assert "6 of 6 seed pairs" in res.ours                       # the sign test is still shown
    steady = _study(tmp_path / "b", lambda t: -0.03)
    part = gr.gka_context(steady, "sqrt_d") | {"gap_gates": gr.init_gap_gates(tmp_path / "b", steady, "sqrt_d",
                                                                               TH, 0.01)}
    res = gr._gka_claim({"id": "003-gka-init-sigma", "inits": {}}, part, "small")
    assert res.verdict == gr.SUPPORTED and "gap stable at this budget: char: sqrt_d − 1 " in res.detail


def test_gka_trains_stably_reads_the_gka_init_studys_char_runs(tmp_path):
    """Fault 4: 003-char-stable read "not run" at small, whose matrix trains no GKA row, although the
    GKA-init study had trained 24 char GKA runs; its char runs are read, its LM runs are not."""
    from kernattn.report.verdicts import stability
    from kernattn.tracks.char import report_runs

    rows = [SimpleNamespace(name="rope", variant="softmax")]
    params = SimpleNamespace(scale="small", matrix=SimpleNamespace(rows=rows),
                             train=SimpleNamespace(out_dir=str(tmp_path / "runs")),
                             studies=SimpleNamespace(out_dir=str(tmp_path / "studies")))
    runs_df = pd.DataFrame({"run_id": ["rope-s0"], "row": ["rope"]})
    assert report_runs.gka_records(params, runs_df) == []
    folder = tmp_path / "studies" / "gka_init" / "runs"
    ids = [f"gka-init_{i}-s{s}" for i in ("1", "sqrt_d", "sqrt_d_half", "median") for s in range(5, 11)]
    for rid in ids:
        _write_run(folder / rid, lambda t: 0.0)
    summary = {"scale": "small", "runs": [{"run_id": r, "track": "char"} for r in ids]
               + [{"run_id": "lm_gka_tokens-init_1-s0", "track": "lm"}]}
    (tmp_path / "studies" / "gka_init" / "summary.json").write_text(json.dumps(summary))
    records = report_runs.gka_records(params, runs_df)
    assert [rid for rid, _ in records] == ids
    res = stability.judge({"id": "003-char-stable"}, records, stability.Rule(1.5, 0.1, 100, 3), "small")
    assert res.verdict == verdicts.REPRODUCED and res.ours.startswith("24 of 24 GKA runs stable")


def test_the_lm_claims_name_the_missing_row_as_the_rows_are_written():
    """Fault 4: the LM claims said "paper: {seed: "003", ...}" of a field long since written
    `document:`; the small scale's micro LM trains the baseline of Table 8 and not GKA-LM."""
    from kernattn.config import load_params
    from kernattn.tracks.lm.report_claims import _missing_pair

    from .test_report import PARAMS

    rows = load_params(PARAMS, "small").lm.rows
    why = _missing_pair(None, {}, rows)
    assert why.startswith("no row of this scale's lm.rows trains GKA-LM of Table 8 (a row with paper: "
                          "{document: gka-paper, table: 8, model: GKA-LM}; the rows here: base, ")
    assert "seed" not in why


def _setting(values):
    from kernattn.tracks.char.report_claims import Setting

    return Setting("final", values, values, None, None, lambda x: f"no {x}", "small", "best loss",
                   trend=budget_trend.rule({}))


def test_the_papers_recipe_is_the_verdict_and_the_other_factor_follows():
    """C of issue 48: the x1 twins (the papers' one lr) give the verdict; the x10 rows' verdict is
    printed after it, with "depends on the recipe" when their intervals exclude 0 on opposite
    sides (000-gpa-beats-rope at small: -0.0175 [-0.0307, -0.0043] at x10, +0.0584 at x1)."""
    from kernattn.tracks.char import report_budgets as rb
    from kernattn.tracks.char import report_claims

    rope = [2.00, 2.01, 2.02]
    def row(shift):
        return {i: x + shift + d for i, (x, d) in enumerate(zip(rope, (-3e-3, 0, 3e-3)))}
    values = {"rope": dict(enumerate(rope)), "gpa": row(-0.0175), "gpa_lr1": row(0.0584), "no_pos": row(0.6)}
    arm = rb.RecipeArms({"rope": "rope", "gpa": "gpa_lr1", "gpa_lr1": "gpa_lr1", "no_pos": "no_pos", "lrope": None},
                        {"rope": "rope", "gpa": "gpa", "gpa_lr1": "gpa", "no_pos": "no_pos", "lrope": "lrope"}, 10.0)
    claims = [{"id": "beats", "kind": "order", "order": ["gpa", "rope"]},
              {"id": "nope", "kind": "order", "order": ["rope", "no_pos"]},
              {"id": "missing", "kind": "order", "order": ["lrope", "rope"]}]
    values["lrope"] = dict(values["rope"])
    got = report_claims._recipe_arms(claims, _setting(values), arm)
    beats = got["beats"]
    assert beats.verdict == verdicts.CONTRADICTED and beats.comparisons[0].a == "gpa_lr1"
    assert beats.shown == ("inconsistent at small; the ×10 arm (variant-owned parameters at 10 × the lr, not the "
                           "papers' one lr): consistent at small — the verdict depends on the recipe")
    assert "×10 arm: gpa − rope: -0.0175" in beats.detail and beats.estimate == pytest.approx(0.0584)
    assert got["nope"].arm == "" and got["nope"].verdict == verdicts.REPRODUCED   # no row the factor speeds up
    missing = got["missing"]
    assert missing.verdict == verdicts.NOT_RUN and "no row at the papers' one lr (×1) for lrope" in missing.detail
    assert got["missing"].arm.startswith("the ×10 arm")


def test_rows_named_at_the_papers_recipe_print_their_x10_twins_after_the_verdict():
    """small_long names its rows at x1 (the verdict as named) and trains x10 twins: the twins'
    verdict follows it; a claim whose row has no x10 twin prints no other arm."""
    from kernattn.tracks.char import report_budgets as rb
    from kernattn.tracks.char import report_claims

    rope = [2.00, 2.01, 2.02]
    def row(shift):
        return {i: x + shift + d for i, (x, d) in enumerate(zip(rope, (-3e-3, 0, 3e-3)))}
    values = {"rope": dict(enumerate(rope)), "gpa": row(0.0584), "gpa_lr10": row(-0.0175), "lrope": row(0.001)}
    arms = rb.RecipeArms({"rope": "rope", "gpa": "gpa", "gpa_lr10": "gpa", "lrope": "lrope"},
                         {"rope": "rope", "gpa": "gpa_lr10", "gpa_lr10": "gpa_lr10", "lrope": None}, 10.0)
    claims = [{"id": "beats", "kind": "order", "order": ["gpa", "rope"]},
              {"id": "lrope", "kind": "order", "order": ["lrope", "rope"]}]
    got = report_claims._recipe_arms(claims, _setting(values), arms)
    beats = got["beats"]
    assert beats.verdict == verdicts.CONTRADICTED and beats.comparisons[0].a == "gpa"
    assert beats.shown.endswith("the ×10 arm (variant-owned parameters at 10 × the lr, not the papers' one lr): "
                                "consistent at small — the verdict depends on the recipe")
    assert "×10 arm: gpa_lr10 − rope: -0.0175" in beats.detail
    assert all(got[c["id"]].claim is c for c in claims)   # the page finds each result by its claim
    assert got["lrope"].arm == "" and got["lrope"].comparisons[0].a == "lrope"


def test_every_gate_passes_on_some_data_and_fails_on_other():
    """A gate that can never pass is a bug (issue 48): each gate of the report, on one constructed
    case it passes and one it fails."""
    flat, falling = [2.0] * len(STEPS), [2.0 - 0.001 * s for s in STEPS]
    trace = lambda end: np.array([[0.0], [0.1], [end]])  # noqa: E731  (a parameter over 100 steps at lr 0.01)
    cases = {
        "loss converged": (gates.loss_converged(STEPS, flat, 0.2, 0.01),
                           gates.loss_converged(STEPS, falling, 0.2, 0.01)),
        "loss converged (wsd)": (gates.loss_converged(STEPS, wsd_curve(0.0), 0.2, 0.01, until=640),
                                 gates.loss_converged(STEPS, wsd_curve(0.02), 0.2, 0.01, until=640)),
        "params converged": (gates.params_converged([0.1], 1.0, 0.5, "p"), gates.params_converged([0.9], 1.0, 0.5, "p")),
        "params settled": (gates.params_settled([0, 50, 100], trace(0.11), [0.01] * 100, 0.5, 0.5, "p"),
                           gates.params_settled([0, 50, 100], trace(0.6), [0.01] * 100, 0.5, 0.5, "p")),
    }
    cum = gates.cumulative([1e-3] * 200)
    curve = lambda gap: {f"x-s{s}": gates.RunCurve(list(range(0, 201, 20)), [2.0 + g + 1e-4 * s * (i % 3)
                                                   for i, g in enumerate(gap)], cum) for s in range(3)}  # noqa: E731
    base = curve([0.0] * 11)
    cases["gap stable"] = (gates.gap_stable("x", curve([-0.03] * 11), "y", base, 0.5, 0.5),
                           gates.gap_stable("x", curve([-0.1 + 0.009 * i for i in range(11)]), "y", base, 0.5, 0.5))
    for name, (good, bad) in cases.items():
        assert good.passed and not bad.passed, name
    steady = np.array([-0.03, -0.03, -0.03]) + np.array([[-2], [-1], [0], [1], [2]]) * 1e-3
    lrs, steps = np.array([0.5, 1.0, 2.0]), np.array([200, 400, 800])
    r = budget_trend.rule({})
    assert budget_trend.read(steady, lrs, steps, r).word in budget_trend.HOLDING
    assert budget_trend.read(-steady, lrs, steps, r).word == verdicts.CONTRADICTED
