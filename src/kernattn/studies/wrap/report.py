"""The line-wrap study's part of the report (gpa-long, Section 3.2; the shape of every part:
report/part.py), read from <studies.out_dir>/wrap/summary.json where the study ran
(report_common.study_section). Intervals (report/stats.py): a bump's mean over seeds is
Student t (mean_ci); a shift from the original corpus is paired by seed. Claim kind study_wrap
(paper_numbers.yaml), judged by studies.reading_verdict over the corpora's votes."""

from __future__ import annotations

from ...report.verdicts import line_wrap, studies
from ...report.claims import ClaimResult
from ...report.part import ClaimKind, ReportContext
from ..report_common import ci_cols, ci_of, study_claims, study_section, write_tables

OUTLINE = ("part-study-wrap", "Study: does the bump follow the line width? (gpa-long, Section 3.2)", (
    ("study-wrap", "The line-wrap counterfactual"),))
CLAIM_KINDS = {"study_wrap": ClaimKind("study-wrap")}


def section(ctx: ReportContext) -> dict:
    """The study's context ({"present": False, ...} without its summary); its tables into ctx.tables."""
    out = study_section(ctx, "wrap", wrap_context)
    write_tables(ctx, tables(out))
    return out


def tables(part: dict) -> dict:
    """The newline peaks per corpus, and the bump per row and corpus with its verdict."""
    import pandas as pd

    if not part["present"]:
        return {}
    return {"study-wrap-peaks.csv": pd.DataFrame(part["peaks"]),
            "study-wrap.csv": pd.DataFrame([
                {"row": r["row"], "corpus": r["corpus"], "newline_peak": r["newline_peak"], **ci_cols("bump", r["bump"]),
                 "bumps": " ".join(map(str, r["bumps"])), "predicted_shift": r["predicted"],
                 **ci_cols("shift", r["shift"]), "verdict": r["verdict"], "reason": r["reason"]}
                for r in part["table"]])}


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    return study_claims(ctx, CLAIM_KINDS, section, _wrap_claim)


def wrap_context(summary: dict) -> dict:
    corpora = summary["corpora"]
    peaks = [{"corpus": c, **summary["peaks"][c]} for c in corpora]
    rows = []
    for r in summary["rows"]:
        init = [b for b in r.get("init_bumps", {}).values()]
        if init:  # the reference the trained bumps are read against
            rows.append({"row": r["row"], "corpus": "bank at initialisation", "newline_peak": None,
                         "bump": ci_of(init), "bumps": init, "shift": None, "predicted": None, "paragraph": None,
                         "votes": False,
                         "verdict": "reference", "reason": r.get("premise_why", ""), "row_verdict": r["verdict"]})
        for c in [*r["corpora"], *({**x, "control": True} for x in r.get("controls", []))]:
            bumps = [b for b in c["bumps"].values()]
            rows.append({"row": r["row"], "corpus": c["corpus"], "newline_peak": c["newline_peak"],
                         "bump": ci_of(bumps), "bumps": bumps, "shift": c.get("shift"),
                         "predicted": c.get("predicted_shift"), "paragraph": c.get("paragraph_shift"),
                         "votes": bool(c.get("votes")) and not c.get("control"),
                         "verdict": ("positive control: " if c.get("control") else "") + c.get("verdict", "reference"),
                         "reason": c.get("reason", ""), "row_verdict": r["verdict"]})
    return {"present": True, "summary": summary, "peaks": peaks, "table": rows}


def _wrap_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    s = part["summary"]
    # the premise per row (a summary from before it was recorded: every row judged, as then)
    unmet = [r for r in s["rows"] if not r.get("premise_met", True)]
    if s["rows"] and len(unmet) == len(s["rows"]):
        # what was measured, never the study's verdict: without the premise the votes say nothing
        # of gpa-long's reading, so "the bump stays at paragraph scale" must not be printed as ours
        return ClaimResult(claim, "premise not met (" + "; ".join(f"{r['row']}: {r['premise_why']}" for r in unmet)
                           + ")", scale=scale, ours="; ".join(f"{r['row']}: {r['premise_why'].split('; ')[0]}"
                                                               for r in unmet),
                           detail="no vote: the original bump must sit at the newline peak, have moved from its "
                                  "initial position on a converged bank, and the positive control be found")
    verdict = studies.reading_verdict(s["verdict"], line_wrap.STAYS, line_wrap.TRACKS)
    skipped = {r["row"] for r in unmet}  # their shifts are shown, the verdict is the others'
    voting = [r for r in part["table"] if r["votes"] and r.get("row") not in skipped]
    ours = "; ".join(f"{r['row']} {r['corpus']}: " + _vote_words(r) for r in voting)
    voting = [r for r in voting if r["shift"] is not None]
    res = ClaimResult(claim, verdict, scale=scale, ours=ours or f"no interval ({s['verdict']})",
                      detail=s["verdict"] + (f"; premise not met, not judged: {', '.join(sorted(skipped))}"
                                             if skipped else ""),
                      interval="95% paired t over seeds of the bump's shift, ± tol lags")
    if len(voting) == 1:
        res.estimate, res.lo, res.hi = voting[0]["shift"]["mean"], voting[0]["shift"]["lo"], voting[0]["shift"]["hi"]
    return res


def _vote_words(r: dict) -> str:
    """One voting corpus of the wrap claim: its shift against the readings' predictions (the
    paragraph prediction where the corpus has its own: kernattn.studies.wrap.votes), or why it
    has no interval (e.g. the bump disappeared)."""
    if r["shift"] is None:
        return r["reason"]
    para = f", paragraph prediction {r['paragraph']:+d}" if r["paragraph"] is not None else ""
    mde = r["shift"].get("mde")
    return (f"shift {r['shift']['mean']:+.1f} [{r['shift']['lo']:+.1f}, {r['shift']['hi']:+.1f}] lags"
            + (f" (MDE {mde:.1f})" if mde is not None else "") + f", line prediction {r['predicted']:+d}{para}")
