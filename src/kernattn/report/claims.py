"""The papers' claims judged on our runs: one ClaimResult per claim of paper_numbers.yaml.

Each part of the report judges the claims of the kinds it owns (report.part: CLAIM_KINDS);
what they share is here: the result of a claim, how its interval is printed, seed 002's claims
(tests of the library, listed as such), and the frames the page writes. Every rule is in
stats.py. `summary_frame` is the report's summary table and tables/claims.csv (one row per
claim); `pairs_frame` holds the pairwise tests behind the orderings (tables/claims-pairs.csv).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from . import stats

SUMMARY_COLUMNS = ["claim", "paper", "where", "statement", "paper_value", "ours", "estimate", "ci_lo", "ci_hi",
                   "interval", "verdict", "scale", "section", "detail"]


@dataclass
class ClaimResult:
    claim: dict
    verdict: str                     # the verdict proper; `shown` adds its scale
    comparisons: list[stats.Comparison] = field(default_factory=list)
    detail: str = ""
    scale: str = stats.PAPER_SCALE
    ours: str = ""                   # our number(s) with interval(s), as printed
    estimate: float | None = None    # the single number behind `ours`, when there is one
    lo: float | None = None
    hi: float | None = None
    interval: str = ""               # how the interval was made
    arm: str = ""                    # the same claim under another recipe, printed after the verdict

    @property
    def shown(self) -> str:
        shown = stats.at_scale(self.verdict, self.scale)
        return f"{shown}; {self.arm}" if self.arm else shown

    @property
    def section(self) -> str:
        """The section id its summary row links to (build.load_paper_numbers sets the kind's default)."""
        return self.claim.get("section", "")

    def summary_record(self) -> dict:
        c = self.claim
        return {"claim": c["id"], "paper": c["paper"], "where": c["where"], "statement": c["statement"],
                "paper_value": _text(c.get("paper_value")), "ours": self.ours or "—", "estimate": self.estimate,
                "ci_lo": self.lo, "ci_hi": self.hi, "interval": self.interval, "verdict": self.shown,
                "scale": self.scale, "section": self.section, "detail": self.detail}


def paper_ref(row, seed: str, table: int | None = None, figure: int | None = None):
    """The row's `paper` entry for that document's table or figure (config.rows.PaperRef), or None."""
    return next((p for p in getattr(row, "paper", ()) if p.seed == seed
                 and (table is None or p.table == table) and (figure is None or p.figure == figure)), None)


def paper_row(rows, seed: str, model: str, table: int | None = None, figure: int | None = None):
    """The row that trains `model` of document `seed`'s table or figure (its `paper` field in
    params.yaml), or None: how every part finds the rows a paper claim compares."""
    return next((r for r in rows if (p := paper_ref(r, seed, table, figure)) is not None and p.model == model), None)


def _text(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def fmt_diff(ci: stats.DiffCI) -> str:
    if not ci.estimable:
        return f"{ci.diff:+.4f} (zero spread: {stats.NOT_ESTIMABLE})"
    return f"{ci.diff:+.4f} [{ci.lo:+.4f}, {ci.hi:+.4f}]"


def summary_frame(results: list[ClaimResult]) -> pd.DataFrame:
    return pd.DataFrame([r.summary_record() for r in results], columns=SUMMARY_COLUMNS)


def pairs_frame(results: list[ClaimResult]) -> pd.DataFrame:
    recs = []
    for c in results:
        for comp in c.comparisons:
            ci = comp.ci
            recs.append({"claim": c.claim["id"], "a": comp.a, "relation": comp.relation, "b": comp.b,
                         "paired": ci.paired if ci else None, "diff": ci.diff if ci else None,
                         "ci_lo": ci.lo if ci else None, "ci_hi": ci.hi if ci else None,
                         "df": ci.df if ci else None, "p": comp.p, "p_holm": comp.p_holm,
                         "family_size": comp.family_size, "mde": comp.mde,
                         "margin": comp.margin, "verdict": stats.at_scale(comp.verdict, c.scale),
                         "claim_verdict": c.shown, "scale": c.scale, "detail": comp.note})
    cols = ["claim", "a", "relation", "b", "paired", "diff", "ci_lo", "ci_hi", "df", "p", "p_holm", "family_size", "mde",
            "margin",
            "verdict", "claim_verdict", "scale", "detail"]
    return pd.DataFrame.from_records(recs, columns=cols)
