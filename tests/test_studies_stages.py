"""Issue 17: the studies' params section (one-line errors) and the `studies` target run end to
end at the micro scale through the real Snakemake: every study's outputs, what the prune study
promises about its two fine-tunings, a resumed median-init run equal to a whole one, and the
main DAG untouched by the studies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from kernattn.config import ParamsError, load_params
from kernattn.io import load_torch
from kernattn.yaml_text import safe_dump, safe_load

from .test_pipeline import dry_run_jobs, run
from .workspace import BIN
from .test_report import PARAMS


# ----------------------------------------------------------------------------- params
@pytest.mark.parametrize("studies, words", [
    ({"gka_init": {"inits": [1.0, "sqrt"]}}, "studies.gka_init.inits[1]: option 'init_sigma'"),
    ({"gka_init": {"inits": [1, 1.0]}}, "studies.gka_init.inits lists one init twice"),
    ({"gka_init": {"inits": []}}, "studies.gka_init.inits is empty"),
    ({"gka_init": {"rows": [{"track": "char", "row": "rope"}]}}, "studies.gka_init.rows[0].row is 'rope'"),
    ({"gka_init": {"rows": [{"track": "audio", "row": "gka"}]}},
     "studies.gka_init.rows[0].track must be one of char, lm, vision"),
    ({"gka_init": {"rows": [{"track": "lm", "row": "base"}]}},
     "studies.gka_init.rows[0].row is 'base': name a row of lm.rows whose attention is gka (gka_tokens, gka_flops"),
    ({"gka_init": {"rows": [{"track": "vision", "row": "deit"}]}},
     "studies.gka_init.rows[0].row is 'deit': name a row of vision.rows whose attention is gka (gka)"),
    ({"wrap": {"rows": ["nope"]}}, "studies.wrap.rows names unknown row 'nope'"),
    ({"wrap": {"rows": ["rope"]}}, "studies.wrap.rows names 'rope', whose attention is 'softmax'"),
    ({"wrap": {"corpora": ["shuffled"]}}, "studies.wrap.corpora has 'shuffled'"),
    ({"wrap": {"width": 0}}, "studies.wrap.width must be > 0"),
    ({"prune": {"rows": ["gka"]}}, "studies.prune.rows names 'gka', whose attention is 'gka'"),
    ({"prune": {"steps": -1}}, "studies.prune.steps must be > 0"),
    ({"seeds": [7]}, "studies.seeds has 7, which the matrix does not train"),
    ({"wrapp": {}}, "unknown key 'studies.wrapp'"),
])
def test_bad_studies_params_are_one_line(tmp_path, studies, words):
    doc = safe_load(PARAMS.read_text())
    doc["studies"] = {**doc["studies"], **studies}
    path = tmp_path / "params.yaml"
    path.write_text(safe_dump(doc, sort_keys=False))
    with pytest.raises(ParamsError) as err:
        load_params(path, "tiny")
    message = str(err.value)
    assert words in message and "\n" not in message and str(path) in message, message


def test_rows_the_scale_does_not_train_are_left_out_of_the_studies(tmp_path):
    """A scale training a subset (matrix.only) runs the studies on the rows it has."""
    from kernattn.studies.gka_init import stages as gka_init
    from kernattn.studies.prune import stages as prune
    from kernattn.studies.wrap import stages as wrap

    doc = safe_load(PARAMS.read_text())
    doc["scales"]["tiny"]["matrix"]["only"] = ["rope", "gpa_m64"]
    path = tmp_path / "params.yaml"
    path.write_text(safe_dump(doc, sort_keys=False))
    p = load_params(path, "tiny")
    assert wrap.wrap_original_runs(p) == ["gpa_m64-s0", "gpa_m64-s1"]
    assert prune.prune_runs(p) == ["gpa_m64-s0", "gpa_m64-s1"]
    corpora = ("rewrapped", "unwrapped", "rewrapped_30", "rewrapped_100", "planted_40", "paragraphs_100")
    assert sorted(wrap.wrap_runs(p)) == sorted(f"gpa_m64-{c}-s{s}" for c in corpora for s in (0, 1))
    # the study trains its own GKA runs, 4 inits x 2 seeds per track: not limited by matrix.only
    assert [r.track for r in gka_init.gka_runs(p).values()] == ["char"] * 8 + ["lm"] * 8 + ["vision"] * 8


def test_the_gka_init_study_trains_its_char_row_at_its_own_seeds(tmp_path):
    """studies.gka_init.seeds: the char GKA row's seeds for this study only (its runs pair with
    each other), beyond the matrix's; the wrap and prune studies keep the studies' seeds; the
    small scale gives it 6 (the fewest a one-sided sign test at 2.5% can pass with); empty is
    a one-line error."""
    from kernattn.studies.gka_init import stages as gka_init
    from kernattn.studies.prune import stages as prune

    small = load_params(PARAMS, "small")
    char_runs = [r.spec.seed for r in gka_init.gka_runs(small).values() if r.track == "char"]
    assert char_runs == [5, 6, 7, 8, 9, 10] * 4 and max(small.matrix.seeds) == 4  # every init the claim names
    assert prune.prune_runs(small)[:5] == [f"gpa_dp_m8-s{s}" for s in range(5)]
    doc = safe_load(PARAMS.read_text())
    doc["scales"]["tiny"]["studies"] = {"gka_init": {"seeds": [7]}}
    path = tmp_path / "params.yaml"
    path.write_text(safe_dump(doc, sort_keys=False))
    runs = gka_init.gka_runs(load_params(path, "tiny"))
    assert sorted(r for r, x in runs.items() if x.track == "char") == [f"gka-init_{i}-s7" for i in
                                                                        ("1", "median", "sqrt_d", "sqrt_d_half")]
    doc["scales"]["tiny"]["studies"] = {"gka_init": {"seeds": []}}
    path.write_text(safe_dump(doc, sort_keys=False))
    with pytest.raises(ParamsError, match=r"studies.gka_init.seeds is empty"):
        load_params(path, "tiny")
    doc["scales"]["tiny"]["studies"] = {"gka_init": {"seeds": [3, 3]}}
    path.write_text(safe_dump(doc, sort_keys=False))
    with pytest.raises(ParamsError, match=r"studies.gka_init.seeds lists seed 3 twice"):
        load_params(path, "tiny")


def test_an_lm_or_vision_scale_without_the_gka_row_leaves_it_out(tmp_path):
    """A scale whose own lm.rows leave out the study's LM row trains the other tracks' and says so."""
    from kernattn.studies.gka_init import stages as gka_init
    from kernattn.config.studies import init_rows_not_trained

    doc = safe_load(PARAMS.read_text())
    doc["scales"]["tiny"]["lm"]["rows"] = [{"name": "base", "variant": "base"}]
    path = tmp_path / "params.yaml"
    path.write_text(safe_dump(doc, sort_keys=False))
    p = load_params(path, "tiny")
    assert init_rows_not_trained(p) == ["lm:gka_tokens"]
    assert {r.track for r in gka_init.gka_runs(p).values()} == {"char", "vision"}


# ----------------------------------------------------------------------------- the target
def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def check_prune(ws: Path) -> None:
    """The control arm's step-0 loss is the trained run's; the pruned arm's is that plus the
    head's zero-ablation cost; no gradient reaches the removed head's W_O columns (hooks for the
    whole run): AdamW only decays them, by (1 - lr x weight_decay) per step, while the control's
    move with their gradients."""
    summary = _json(ws / "results/micro/studies/prune/gpa_dp_m8-s0/summary.json")
    final = _json(ws / "results/micro/runs/gpa_dp_m8-s0/final.json")
    assert summary["loss_before"] == pytest.approx(final["val_loss_sample"], abs=1e-6)  # the same fixed windows
    assert summary["loss_after_removal"] - summary["loss_before"] == pytest.approx(summary["zero_ablation"][0],
                                                                                   abs=1e-6)
    [head] = summary["removed"]
    base = load_torch(ws / "results/micro/runs/gpa_dp_m8-s0/ckpt.pt")["model"]
    key = f"blocks.{head['layer'] - 1}.attn.proj_out.weight"
    width = base[key].shape[1] // 2  # micro: 2 heads
    cols = slice((head["head"] - 1) * width, head["head"] * width)
    arms = {a: load_torch(ws / f"results/micro/studies/prune/gpa_dp_m8-s0/{a}/ckpt.pt")["model"]
            for a in ("pruned", "control")}
    decay = (1 - summary["lr"] * load_params(ws / "params.yaml").train.weight_decay) ** summary["fine_tune_steps"]
    torch.testing.assert_close(arms["pruned"][key][:, cols], base[key][:, cols] * decay, rtol=1e-6, atol=0)
    assert not torch.allclose(arms["control"][key][:, cols], base[key][:, cols] * decay, rtol=1e-4, atol=0)
    for arm in ("pruned", "control", "random"):
        assert _json(ws / f"results/micro/studies/prune/gpa_dp_m8-s0/{arm}/final.json")["steps"] == 3
    # the random-head control: another head, its step-0 loss that head's zero-ablation cost above before
    [other] = summary["random_removed"]
    assert (other["layer"], other["head"]) != (head["layer"], head["head"])
    zero = summary["heads"]["zero_cost"][other["layer"] - 1][other["head"] - 1]
    assert summary["loss_random_after_removal"] - summary["loss_before"] == pytest.approx(zero, abs=1e-6)
    assert summary["premise_met"] == summary["flagged_weak"] and "threshold 0.1" in summary["premise_why"]
    rows = (ws / "results/micro/studies/prune/prune_rows.csv").read_text().splitlines()
    assert rows[0].startswith("row,runs,premise_met,premise_why") and rows[1].startswith("gpa_dp_m8,1,")


def check_gka_init(ws: Path) -> None:
    """Every track's GKA row trained per init: sigma at the start as the rule says, sigma on
    every val line, the tracks' own metrics and folders."""
    gka = _json(ws / "results/micro/studies/gka_init/summary.json")
    inits = ["1", "sqrt_d_half", "median"]  # the micro scale's
    assert [(r["track"], r["init"]) for r in gka["runs"]] == [(t, i) for t in ("char", "lm", "vision") for i in inits]
    by = {(r["track"], r["init"]): r for r in gka["runs"]}
    # sqrt(d) / 2 at the head widths of micro: char 32 / 2 heads, LM head_dim 32, ViT 32 / 2 heads
    assert by["char", "sqrt_d_half"]["sigma_curve"][0]["sigma"] == [[2.0, 2.0]]
    assert by["lm", "sqrt_d_half"]["sigma_curve"][0]["sigma"] == [[pytest.approx(32 ** 0.5 / 2)] * 2]  # depth 1, 2 heads
    assert by["vision", "sqrt_d_half"]["sigma_curve"][0]["sigma"] == [[2.0, 2.0]] * 2  # depth 2
    assert [c["step"] for c in by["char", "median"]["sigma_curve"]] == [0, 3, 6]
    assert [c["step"] for c in by["lm", "median"]["sigma_curve"]] == [0, 2, 4]
    for track, run_id in (("char", "gka-init_1-s0"), ("lm", "lm_gka_tokens-init_1-s0"), ("vision", "vision_gka-init_1-s0")):
        folder = ws / "results/micro/studies/gka_init/runs" / run_id
        lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
        assert all("sigma_L1H1" in x for x in lines if x.get("split") == "val"), track
        assert _json(folder / "final.json")["run_id"] == run_id
    for track, (row, metric) in {"char": ("gka", "val_loss"), "lm": ("gka_tokens", "val_loss"),
                                 "vision": ("gka", "top1_ema")}.items():
        for init in inits:
            r = by[track, init]
            assert r["row"] == row and r[metric] is not None
            assert len(r["diag_start"]) == len(r["diag_end"]) == len(r["sigma_end"])
            median = by[track, "median"]["sigma_curve"][0]["sigma"]
            assert median != by[track, "1"]["sigma_curve"][0]["sigma"]  # the median rule moved sigma


def check_studies(ws: Path) -> None:
    wrap = _json(ws / "results/micro/studies/wrap/summary.json")
    assert wrap["corpora"] == ["original", "rewrapped", "unwrapped", "planted_20"]
    assert [r["row"] for r in wrap["rows"]] == ["gpa_dp_m8"]
    # the planted period never votes: a control of its own, its newline peak the period + 1
    assert [c["corpus"] for c in wrap["rows"][0]["corpora"]] == ["original", "rewrapped", "unwrapped"]
    assert [c["corpus"] for c in wrap["rows"][0]["controls"]] == ["planted_20"]
    assert wrap["peaks"]["planted_20"]["sharp"] == 21
    # hard-wrapped at 63-68 characters (peak 68 = line + 1); rewrapped at 50: a peak at most 50 + 1
    assert wrap["peaks"]["original"]["sharp"] == 68 and wrap["peaks"]["rewrapped"]["sharp"] <= wrap["width"] + 1
    assert wrap["verdict"] == "inconclusive"  # one seed: no interval, as the rule says
    [row] = wrap["rows"]  # the controls: the bank at initialisation, the premise as data
    assert set(row["init_bumps"]) == {"0"} and isinstance(row["premise_met"], bool) and row["premise_why"]
    # 6 steps cannot settle a bank: the converged gate fails and the premise says so
    assert "; bank not converged: bank log-parameters moved up to" in row["premise_why"] and not row["premise_met"]
    assert "gpa_dp_m8,initialisation,0," in (ws / "results/micro/studies/wrap/bumps.csv").read_text()
    # the unwrapped corpus votes (kernattn.studies.wrap.votes), though one seed reads nothing yet
    unwrapped = {c["corpus"]: c for c in row["corpora"]}["unwrapped"]
    assert unwrapped["votes"] is True and unwrapped["verdict"] == "inconclusive" and "seed(s)" in unwrapped["reason"]
    assert wrap["vanish_fraction"] == 0.5 and wrap["max_lag"] == 32
    for corpus in ("rewrapped", "unwrapped", "planted_20"):
        data = ws / "results/micro/studies/wrap/data" / corpus
        assert (data / "vocab.json").read_text() == (ws / "results/micro/data/dickens/vocab.json").read_text()
        assert _json(ws / f"results/micro/studies/wrap/runs/gpa_dp_m8-{corpus}-s0/final.json")["steps"] == 6
        # prepare-wrap checked that only the layout's whitespace changed (kernattn.studies.wrap.checks)
        changes = _json(data / "meta.json")["whitespace_changes"]
        for split in ("train", "val"):
            c = changes[split]
            planted = -(-c["characters"] // 20) - 1  # a newline after every 20 characters
            assert c["characters_out"] == c["characters"] + (planted if corpus == "planted_20" else 0)
            assert c["characters_changed"] > 0 and c.get("newlines_inserted", planted) == planted
    check_gka_init(ws)
    prune = _json(ws / "results/micro/studies/prune/summary.json")
    assert [r["run_id"] for r in prune["runs"]] == ["gpa_dp_m8-s0"]
    check_prune(ws)


@pytest.mark.e2e
def test_studies_target_end_to_end_at_micro(micro_dag, tmp_path):
    """The studies target on top of the micro DAG: it reads the main DAG's runs and never
    retrains them (that the main DAG has no study job: tests/test_pipeline.py)."""
    assert micro_dag.returncode == 0, micro_dag.output[-3000:]
    ws = micro_dag.copy(tmp_path)
    trained = {p: p.stat().st_mtime_ns for p in (ws / "results/micro/runs").glob("*/final.json")}
    first = run([str(BIN / "snakemake"), "--cores", "2", "studies"], ws)
    assert first.returncode == 0, first.stderr[-3000:]
    check_studies(ws)
    assert {p: p.stat().st_mtime_ns for p in trained} == trained  # the main DAG's runs were read, not retrained
    jobs, proc = dry_run_jobs(ws, "studies")
    assert proc.returncode == 0 and jobs == [], jobs
    shutil.rmtree(ws / "results/micro/studies/prune")  # outputs gone: only their stages rerun
    jobs, _ = dry_run_jobs(ws, "studies")
    assert jobs == ["prune@gpa_dp_m8-s0", "prune_study"], jobs
    # a median-init run stopped after 3 steps and resumed ends with the whole run's weights and flag
    whole = ws / "results/micro/studies/gka_init/runs/gka-init_median-s0"
    kept = load_torch(whole / "ckpt.pt")["model"]
    args = ["--params", "params.yaml", "--run", "gka-init_median-s0", "--no-progress"]
    stopped = run([str(BIN / "kernattn"), "train-gka-init", *args, "--fresh", "--stop-after", "3"], ws)
    assert stopped.returncode == 0 and not (whole / "final.json").exists(), stopped.stderr[-2000:]
    resumed = run([str(BIN / "kernattn"), "train-gka-init", *args], ws)
    assert resumed.returncode == 0 and "resuming at step 3" in resumed.stdout + resumed.stderr
    again = load_torch(whole / "ckpt.pt")["model"]
    assert set(again) == set(kept) and all(torch.equal(again[k], kept[k]) for k in kept)
    assert bool(again["blocks.0.attn.sigma_ready"])


def test_init_labels_name_the_runs():
    from kernattn.config.studies import init_label
    from kernattn.studies.gka_init.stages import gka_runs

    assert [init_label(v) for v in (1.0, 1, 0.5, 2.25, "median")] == ["1", "1", "0p5", "2p25", "median"]
    runs = gka_runs(load_params(PARAMS, "tiny"))
    inits = ("1", "sqrt_d_half", "sqrt_d", "median")
    assert sorted(runs) == sorted(f"{prefix}-init_{i}-s{s}" for prefix in ("gka", "lm_gka_tokens", "vision_gka")
                                  for i in inits for s in (0, 1))
    run = runs["gka-init_sqrt_d-s1"]
    assert (run.track, run.label, run.spec.seed, run.spec.variant, run.spec.options["init_sigma"]) == (
        "char", "sqrt_d", 1, "gka", "sqrt_d")
    # an LM run keeps its row (the budget it matches: base's tokens) and the row's options
    lm = runs["lm_gka_tokens-init_median-s0"]
    assert (lm.track, lm.spec.row, lm.spec.compute.match, lm.spec.compute.row) == ("lm", "gka_tokens", "tokens", "base")
    assert lm.spec.options == {"init_sigma": "median"} and lm.spec.run_id == "lm_gka_tokens-init_median-s0"
    assert runs["vision_gka-init_1-s1"].spec.variant == "gka"


@pytest.mark.parametrize("command", ["train-wrap", "train-gka-init", "prune"])
def test_a_study_command_names_its_runs_for_an_unknown_one(command, capsys):
    """Every study's training command refuses a run id it does not have with one line listing its runs."""
    from kernattn.cli import main

    assert main([command, "--params", str(PARAMS), "--scale", "micro", "--run", "nope-s0"]) == 2
    err = capsys.readouterr().err
    assert f"no run 'nope-s0' in the {command} study of scale 'micro'; runs: " in err
