"""The report's studies part (issue 17; the shape of every part: report/part.py): the
line-wrap counterfactual, GKA's bandwidth at initialisation, removing a weak head. Read from
each study's summary.json under studies.out_dir when it exists (`snakemake --cores all
studies` writes them; the report reads what exists, so the main DAG's report builds without
them); a missing study is a section saying how to produce it, and its summary row reads "not
run".

Intervals (report/stats.py): a mean over seeds is Student t (mean_ci); a difference between
two inits, or between the pruned and the control fine-tuning, is paired (same seed, same
batches: paired_diff_ci). The claims (paper_numbers.yaml kinds study_wrap, study_gka_init,
study_prune) are judged by stats.reading_verdict, stats.init_family_comparisons (the GKA
inits of every track, one Holm family) and stats.compare_noninferior. Each study's context
and claim are in report_wrap.py, report_gka.py and report_prune.py; this module is the part.
"""

from __future__ import annotations

from .. import studies as paths
from ..report import stats
from ..report.claims import ClaimResult
from ..report.part import ClaimKind, ReportContext
from .report_common import ci_cols, read_summary
from .report_gka import _gka_claim, gka_context, sigma_figure
from .report_prune import _arch_columns, _heads, _prune_claim, prune_context, prune_margin
from .report_wrap import _wrap_claim, wrap_context

OUTLINE = ("part-studies", "Studies: the experiments the papers leave open (issue 17)", (
    ("study-wrap", "Does the bump follow the line width? The line-wrap counterfactual (gpa-long, Section 3.2)"),
    ("study-gka-init", "GKA's bandwidth at initialisation (gka-paper gives none)"),
    ("study-prune", "Removing a weak head, then fine-tuning (gpa-long, Sections 3.1 and 4)")))
CLAIM_KINDS = {"study_wrap": ClaimKind("study-wrap"), "study_gka_init": ClaimKind("study-gka-init"),
               "study_prune": ClaimKind("study-prune", ("margin",))}


# ----------------------------------------------------------------------------- the part
def section(ctx: ReportContext) -> dict:
    """The three studies' contexts (each {"present": False, ...} when its summary is missing);
    their tables into ctx.tables."""
    params = ctx.params
    margin, margin_why = prune_margin(next(iter(ctx.claims_of(["study_prune"])), None), params)
    out = {"command": paths.command(), "params": params.studies}
    for key, study, build in (("wrap", "wrap", wrap_context), ("gka", "gka_init", lambda s: gka_context(s, params.studies.gka_init.sign_test)),
                              ("prune", "prune", lambda s: prune_context(s, margin) | {"margin_why": margin_why})):
        path = paths.summary_path(params, study)
        summary = read_summary(path)
        if summary is None or summary.get("scale") != params.scale:
            out[key] = {"present": False, "path": str(path)}
        else:
            out[key] = {**build(summary), "path": str(path)}
    if out["gka"]["present"] and out["gka"]["summary"]["runs"]:
        sigma_figure(ctx.assets / "study-gka-sigma.png", out["gka"]["summary"], params.scale)
        out["gka"]["figure"] = "assets/study-gka-sigma.png"
    for name, df in tables(out, params.scale).items():
        df.to_csv(ctx.tables / name, index=False)
    return out


def tables(section: dict, scale: str) -> dict[str, "pd.DataFrame"]:
    """The studies part's tables as CSV frames (tables/<name>): every number the page shows,
    each test's verdict worded for the scale as the page words it (stats.at_scale)."""
    import pandas as pd

    out = {}
    if section.get("wrap", {}).get("present"):
        w = section["wrap"]
        out["study-wrap-peaks.csv"] = pd.DataFrame(w["peaks"])
        out["study-wrap.csv"] = pd.DataFrame([
            {"row": r["row"], "corpus": r["corpus"], "newline_peak": r["newline_peak"], **ci_cols("bump", r["bump"]),
             "bumps": " ".join(map(str, r["bumps"])), "predicted_shift": r["predicted"],
             **ci_cols("shift", r["shift"]), "verdict": r["verdict"], "reason": r["reason"]} for r in w["table"]])
    if section.get("gka", {}).get("present"):
        out["study-gka-init.csv"] = pd.DataFrame([
            {"track": t["track"], "row": t["row"], "metric": t["metric_label"], "init": r["init"], "n": r["n"],
             **ci_cols("value", r["metric"]), **ci_cols("diff_vs_baseline", r["diff"]), "p_holm": r["p_holm"],
             "test": stats.at_scale(r["verdict"], scale), **ci_cols("val_loss", r["loss"]), **ci_cols("top1_ema", r["top1"]),
             "sigma_start": " ".join(f"{v:.4g}" for v in r["sigma_start"]),
             "sigma_end": " ".join(f"{v:.4g}" for v in r["sigma_end"]),
             "diag_start": " ".join(f"{v:.4g}" for v in r["diag_start"]),
             "diag_end": " ".join(f"{v:.4g}" for v in r["diag_end"]), "grad_ratio_start": r["grad_ratio"]}
            for t in section["gka"]["tracks"] for r in t["table"]])
    if section.get("prune", {}).get("present"):
        keep = ("run_id", "row", "seed", "flagged_weak", "premise_met", "premise_why", "loss_before",
                "loss_after_removal", "loss_after_fine_tune", "loss_control_fine_tune", "cost_after_removal",
                "cost_after_fine_tune", "loss_random_after_removal", "loss_random_after_fine_tune",
                "cost_random_after_removal", "cost_random_after_fine_tune", "params_saved", "params_saved_fraction",
                "flops_saved_per_token", "flops_saved_fraction")
        out["study-prune.csv"] = pd.DataFrame([
            {**{k: r.get(k) for k in keep}, "removed": _heads(r["removed"]),
             "random_removed": _heads(r.get("random_removed", [])),
             "strength": " ".join(f"{v:.4g}" for v in r["strength"]),
             "zero_ablation": " ".join(f"{v:.6g}" for v in r["zero_ablation"]),
             "mean_ablation": " ".join(f"{v:.6g}" for v in r["mean_ablation"])} for r in section["prune"]["runs"]])
        out["study-prune-rows.csv"] = pd.DataFrame([_arch_columns(a, scale) for a in section["prune"]["architectures"]])
    return out


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    scale = ctx.scale
    out = []
    for claim in ctx.claims_of(CLAIM_KINDS):
        part = section.get({"study_wrap": "wrap", "study_gka_init": "gka", "study_prune": "prune"}[claim["kind"]])
        if not part or not part["present"]:
            out.append(ClaimResult(claim, stats.NOT_RUN, scale=scale, ours="—",
                                   detail=f"produce it with: {paths.command()}"))
        elif claim["kind"] == "study_wrap":
            out.append(_wrap_claim(claim, part, scale))
        elif claim["kind"] == "study_gka_init":
            out.append(_gka_claim(claim, part, scale))
        else:
            out.append(_prune_claim(claim, part, scale))
    return out
