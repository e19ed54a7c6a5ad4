"""The weak-head removal study's part of the report (gpa-long, Sections 3.1 and 4; the shape of
every part: report/part.py): its context, its non-inferiority margin, its tables and its claim,
read from <studies.out_dir>/prune/summary.json where the study ran (report_common.study_section).
Intervals (report/stats.py): the pruned minus the control fine-tuning is paired by seed (same
batches: paired_diff_ci); claim kind study_prune (paper_numbers.yaml), judged per architecture
by comparisons.compare_noninferior."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ...report import stats, verdicts
from ...report.verdicts import comparisons
from ...report.claims import ClaimResult, fmt_diff, margin_rule
from ...report.part import ClaimKind, ReportContext
from ..report_common import ci_cols, ci_of, study_claims, study_section, write_tables

OUTLINE = ("part-study-prune", "Study: removing a weak head, then fine-tuning (gpa-long, Sections 3.1 and 4)", (
    ("study-prune", "Each trained GPA run with its weakest heads removed"),))
CLAIM_KINDS = {"study_prune": ClaimKind("study-prune", ("margin",))}
# the run table's columns as the summary holds them (tables: the rest are lists, joined)
RUN_COLUMNS = ("run_id", "row", "seed", "flagged_weak", "premise_met", "premise_why", "loss_before",
               "loss_after_removal", "loss_after_fine_tune", "loss_control_fine_tune", "cost_after_removal",
               "cost_after_fine_tune", "loss_random_after_removal", "loss_random_after_fine_tune",
               "cost_random_after_removal", "cost_random_after_fine_tune", "params_saved", "params_saved_fraction",
               "flops_saved_per_token", "flops_saved_fraction")


def relative_margin(row: str, reference: list[float], r: float) -> tuple[float, str]:
    """(margin, why) of a `{relative: r}` margin: r x the mean validation loss of the
    architecture's unpruned reference arm (fine-tuned as long, without removal). The margin
    is read off that arm's runs, but its seed-to-seed error (~1e-3 of a loss) moves 1% of it
    by ~1e-5 nats, far below anything the test resolves."""
    mean = statistics.fmean(reference)
    return r * mean, (f"margin {r * mean:.4f} = {r:g} × {row}'s unpruned reference (control fine-tuned without "
                      f"removal) validation loss {mean:.4f}, mean of {verdicts.seeds_text(len(reference))}")


def _arch(row: str, runs: list[dict], threshold: float, margin: float | dict | None) -> dict:
    """One architecture's judgement: the premise, the cost without fine-tuning (the paper's
    "without any loss of performance in inference") and after it (against the control), each
    non-inferior at `margin` ({"relative": r}: relative_margin of this architecture's control),
    and the random-head control (weak cost < random cost)."""
    from .study import row_premise

    met, why = row_premise(runs, threshold)
    col = {k: [r.get(k) for r in runs] for k in ("loss_before", "loss_after_removal", "loss_after_fine_tune",
                                                  "loss_control_fine_tune", "cost_after_removal",
                                                  "cost_after_fine_tune", "cost_random_after_removal",
                                                  "cost_random_after_fine_tune")}
    has_random = all(v is not None for v in col["cost_random_after_removal"])
    margin_why = None
    if isinstance(margin, dict):
        margin, margin_why = relative_margin(row, col["loss_control_fine_tune"], margin["relative"])
    comps = {}
    if margin is not None:
        comps["no_fine_tune"] = comparisons.compare_noninferior(
            f"{row}: removed, no fine-tuning", col["loss_after_removal"], f"{row}: before removal",
            col["loss_before"], margin, paired=True)
        comps["fine_tuned"] = comparisons.compare_noninferior(
            f"{row}: removed + fine-tuned", col["loss_after_fine_tune"], f"{row}: control fine-tuned",
            col["loss_control_fine_tune"], margin, paired=True)
    if has_random:
        for key, weak, rand in (("random_no_fine_tune", "cost_after_removal", "cost_random_after_removal"),
                                ("random_fine_tuned", "cost_after_fine_tune", "cost_random_after_fine_tune")):
            comps[key] = comparisons.compare_less(f"{row}: weakest-bank cost", col[weak], f"{row}: random-head cost",
                                            col[rand], paired=True)
    return {"row": row, "runs": len(runs), "seeds": sorted(r["seed"] for r in runs), "premise_met": met,
            "premise_why": why, "comparisons": comps, "margin": margin, "margin_why": margin_why,
            "cost_no_ft": stats.paired_diff_ci(col["loss_after_removal"], col["loss_before"]),
            "cost_ft": stats.paired_diff_ci(col["loss_after_fine_tune"], col["loss_control_fine_tune"]),
            "random_no_ft": ci_of(col["cost_random_after_removal"]) if has_random else None,
            "random_ft": ci_of(col["cost_random_after_fine_tune"]) if has_random else None}


def prune_context(summary: dict, margin: float | dict | None) -> dict:
    """The prune section; `margin` from prune_margin (a number, {"relative": r} set per
    architecture, or None). The page's one margin: the number, or each architecture's."""
    runs = summary["runs"]
    pruned = [r["loss_after_fine_tune"] for r in runs]
    control = [r["loss_control_fine_tune"] for r in runs]
    removal = stats.paired_diff_ci([r["loss_after_removal"] for r in runs], [r["loss_before"] for r in runs])
    tuned = stats.paired_diff_ci(pruned, control)
    archs = [_arch(row, [r for r in runs if r["row"] == row], summary["threshold"], margin)
             for row in dict.fromkeys(r["row"] for r in runs)]
    if isinstance(margin, dict):
        margin = (f"{margin['relative']:g} × each architecture's unpruned reference loss: "
                  + ", ".join(f"{a['row']} {a['margin']:.4f}" for a in archs))
    return {"present": True, "summary": summary, "runs": runs, "removal": removal, "tuned": tuned,
            "architectures": archs, "margin": margin,
            "params_saved": ci_of(r["params_saved_fraction"] for r in runs),
            "flops_saved": ci_of(r["flops_saved_fraction"] for r in runs)}


def prune_margin(claim: dict | None, params) -> tuple[float | dict | None, str]:
    """The prune claim's non-inferiority margin and how it was set (claims.margin_rule): a
    number fixed in paper_numbers.yaml; {"relative": r}, r (fixed there) x each architecture's
    unpruned reference loss, set per architecture (relative_margin); or a fraction (fixed
    there) of the char track's NoPE - RoPE gap at this scale (the rows' final validation
    losses, paired by seed: comparisons.noninferiority_margin). None, with the reason, when either
    row has no finished run here or the gap is not established. Any other form: ReportError."""
    if claim is None:
        return None, "no prune claim"
    m = margin_rule(claim, ("number", "relative", "fraction"))
    if "number" in m:
        return m["number"], f"margin {m['number']:.4f} (fixed)"
    if "relative" in m:
        return m, (f"margin {m['relative']:g} × each architecture's unpruned reference (control fine-tuned "
                   f"without removal) validation loss")
    from ...tracks.char import stages as char

    losses: dict[str, dict[int, float]] = {row: {} for row in m["of"]}
    for spec in char.runs(params):
        final = Path(char.final_output(params, spec.run_id))
        if spec.row in losses and final.is_file():
            losses[spec.row][spec.seed] = float(json.loads(final.read_text())["val_loss"])
    nope, rope = m["of"]
    seeds = sorted(losses[nope].keys() & losses[rope].keys())
    if not seeds:
        return None, f"no margin: {nope} and {rope} have no finished runs of one seed at scale {params.scale}"
    margin, why = comparisons.noninferiority_margin(m["fraction"], [losses[nope][k] for k in seeds],
                                              [losses[rope][k] for k in seeds], paired=True, end=m["end"])
    return margin, (f"margin {margin:.4f} = {why}" if margin is not None else f"no margin: {why}")


def _heads(heads: list[dict]) -> str:
    return " ".join(f"L{h['layer']}H{h['head']}" for h in heads)


def _arch_columns(a: dict, scale: str) -> dict:
    """One architecture's line of study-prune-rows.csv: its premise, costs and tests."""
    line = {"row": a["row"], "runs": a["runs"], "premise_met": a["premise_met"], "premise_why": a["premise_why"],
            **ci_cols("cost_no_fine_tune", a["cost_no_ft"]), **ci_cols("cost_fine_tuned", a["cost_ft"]),
            **ci_cols("random_cost_no_fine_tune", a["random_no_ft"]),
            **ci_cols("random_cost_fine_tuned", a["random_ft"])}
    for key, comp in a["comparisons"].items():
        line[f"test_{key}"] = verdicts.at_scale(comp.verdict, scale)
        line[f"test_{key}_mde"] = comp.mde  # minimum detectable effect at its seeds and spread (None: not estimable)
    return line


def premise_not_met(threshold: float, weakest: float) -> str:
    """The claim row's words when no architecture has a bank below the threshold."""
    return f"premise not met (no bank below threshold {threshold:g}; weakest {weakest:.3g})"


def _prune_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    """Judged on the architectures whose every run has a bank below the threshold (gpa-long's
    premise); their no-fine-tuning and fine-tuned costs, each non-inferior at the margin."""
    archs = part["architectures"]
    if not archs:
        return ClaimResult(claim, verdicts.NOT_RUN, scale=scale, ours="—", detail="no pruned run")
    s = part["summary"]
    judged = [a for a in archs if a["premise_met"]]
    if not judged:
        weakest = min(r.get("weakest_strength", min(r["strength"])) for r in part["runs"])
        return ClaimResult(claim, premise_not_met(s["threshold"], weakest), scale=scale,
                           ours="; ".join(f"{a['row']}: {a['premise_why']}" for a in archs),
                           detail="the k weakest heads were removed anyway; their costs are in the section")
    if part["margin"] is None:
        return ClaimResult(claim, verdicts.not_judged(part.get("margin_why", "no margin")), scale=scale,
                           ours="; ".join(f"{a['row']}: {a['premise_why']}" for a in judged),
                           detail="the costs without and after fine-tuning are in the section")
    comps = [a["comparisons"][k] for a in judged for k in ("no_fine_tune", "fine_tuned") if k in a["comparisons"]]
    ours = "; ".join(f"{c.a} − {c.b.rpartition(': ')[2]}: {fmt_diff(c.ci) if c.ci else 'no interval'}"
                     + (f", MDE {c.mde:.4f}" if c.mde is not None else "") for c in comps)
    skipped = [a["row"] for a in archs if not a["premise_met"]]
    own = [a["margin_why"] for a in judged if a.get("margin_why")]  # a relative margin: each architecture's
    detail = ("; ".join(own) if own else part.get("margin_why", f"margin {part['margin']}")) + (
        f"; premise not met, not judged: {', '.join(skipped)}" if skipped else "")
    res = ClaimResult(claim, verdicts.combine([c.verdict for c in comps]), comps, scale=scale, ours=ours,
                      detail=detail, interval="95% paired t over seeds of the cost without fine-tuning")
    first = judged[0]["comparisons"].get("no_fine_tune")
    if len(judged) == 1 and first is not None and first.ci is not None:  # the paper's "in inference" cost
        res.estimate, res.lo, res.hi = first.ci.diff, first.ci.lo, first.ci.hi
    return res


# ----------------------------------------------------------------------------- the part
def section(ctx: ReportContext) -> dict:
    """The study's context ({"present": False, ...} without its summary) with the margin its
    claim is judged at and why; its tables into ctx.tables."""
    margin, why = prune_margin(next(iter(ctx.claims_of(CLAIM_KINDS)), None), ctx.params)
    out = study_section(ctx, "prune", lambda s: prune_context(s, margin) | {"margin_why": why})
    write_tables(ctx, tables(out, ctx.params.scale))
    return out


def tables(part: dict, scale: str) -> dict:
    """Every pruned run, and every architecture's tests."""
    import pandas as pd

    if not part["present"]:
        return {}
    return {"study-prune.csv": pd.DataFrame([
                {**{k: r.get(k) for k in RUN_COLUMNS}, "removed": _heads(r["removed"]),
                 "random_removed": _heads(r.get("random_removed", [])),
                 "strength": " ".join(f"{v:.4g}" for v in r["strength"]),
                 "zero_ablation": " ".join(f"{v:.6g}" for v in r["zero_ablation"]),
                 "mean_ablation": " ".join(f"{v:.6g}" for v in r["mean_ablation"])} for r in part["runs"]]),
            "study-prune-rows.csv": pd.DataFrame([_arch_columns(a, scale) for a in part["architectures"]])}


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    return study_claims(ctx, CLAIM_KINDS, section, _prune_claim)
