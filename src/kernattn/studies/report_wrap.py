"""The line-wrap study in the report (gpa-long, Section 3.2): its context and its claim (the
studies' part, studies/report.py, calls both)."""

from __future__ import annotations

from ..report import stats
from ..report.claims import ClaimResult
from . import bumpshift
from .report_common import ci_of


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
        return ClaimResult(claim, "premise not met (" + "; ".join(f"{r['row']}: {r['premise_why']}" for r in unmet)
                           + ")", scale=scale, ours=f"bump shift verdict without the premise: {s['verdict']}",
                           detail="the original bump must sit at the newline peak and have moved from its "
                                  "initial position")
    verdict = stats.reading_verdict(s["verdict"], bumpshift.STAYS, bumpshift.TRACKS)
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
    paragraph prediction where the corpus has its own: kernattn.studies.wrap_votes), or why it
    has no interval (e.g. the bump disappeared)."""
    if r["shift"] is None:
        return r["reason"]
    para = f", paragraph prediction {r['paragraph']:+d}" if r["paragraph"] is not None else ""
    mde = r["shift"].get("mde")
    return (f"shift {r['shift']['mean']:+.1f} [{r['shift']['lo']:+.1f}, {r['shift']['hi']:+.1f}] lags"
            + (f" (MDE {mde:.1f})" if mde is not None else "") + f", line prediction {r['predicted']:+d}{para}")
