"""The papers' claims judged on our runs: one ClaimResult per claim of paper_numbers.yaml.

Each part of the report judges the claims of the kinds it owns (report.part: CLAIM_KINDS);
what they share is here: the result of a claim, how its interval is printed, kr-blog's claims
(tests of the library, listed as such), and the frames the page writes. Every rule is in
report/verdicts/ (its package docstring maps them). `summary_frame` is the report's summary
table and tables/claims.csv (one row per claim); `pairs_frame` holds the pairwise tests behind
the orderings (tables/claims-pairs.csv: each with its 95% interval and, when tested, the interval at its Holm step's level, which is
the one its verdict is read at). `margin_rule` checks a non-inferiority claim's margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from . import stats, verdicts
from .verdicts.comparisons import MARGIN_ENDS, Comparison
from .part import ReportError

SUMMARY_COLUMNS = ["claim", "paper", "where", "statement", "paper_value", "ours", "estimate", "ci_lo", "ci_hi",
                   "interval", "verdict", "scale", "section", "detail"]


@dataclass
class ClaimResult:
    claim: dict
    verdict: str                     # the verdict proper; `shown` adds its scale
    comparisons: list[Comparison] = field(default_factory=list)
    detail: str = ""
    scale: str = verdicts.PAPER_SCALE
    ours: str = ""                   # our number(s) with interval(s), as printed
    estimate: float | None = None    # the single number behind `ours`, when there is one
    lo: float | None = None
    hi: float | None = None
    interval: str = ""               # how the interval was made
    arm: str = ""                    # the same claim under another recipe, printed after the verdict
    regime: str = ""                 # below the paper scale: how far its runs trained ("early training, 0.4 epoch")

    @property
    def shown(self) -> str:
        shown = verdicts.at_scale(self.verdict, self.scale, self.regime)
        return f"{shown}; {self.arm}" if self.arm else shown

    @property
    def section(self) -> str:
        """The section id its summary row links to (build.load_paper_numbers sets the kind's default)."""
        return self.claim.get("section", "")

    def summary_record(self) -> dict:
        c = self.claim
        return {"claim": c["id"], "paper": c["paper"], "where": c["where"], "statement": c["statement"],
                "paper_value": fmt_value(c.get("paper_value")), "ours": self.ours or "—", "estimate": self.estimate,
                "ci_lo": self.lo, "ci_hi": self.hi, "interval": self.interval, "verdict": self.shown,
                "scale": self.scale, "section": self.section, "detail": self.detail}


def paper_ref(row, seed: str, table: int | None = None, figure: int | None = None):
    """The row's `paper` entry for that document's table or figure (config.rows.PaperRef), or None."""
    return next((p for p in getattr(row, "paper", ()) if p.id == seed
                 and (table is None or p.table == table) and (figure is None or p.figure == figure)), None)


def paper_row(rows, seed: str, model: str, table: int | None = None, figure: int | None = None):
    """The row that trains `model` of document `seed`'s table or figure (its `paper` field in
    params.yaml), or None: how every part finds the rows a paper claim compares."""
    return next((r for r in rows if (p := paper_ref(r, seed, table, figure)) is not None and p.model == model), None)


def fmt_value(v) -> str:
    """A value as a table cell: none (None, or NaN as a frame holds it) as "—", an int with
    thousands separators, anything else as str() writes it."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def fmt_diff(ci: stats.DiffCI) -> str:
    if not ci.estimable:
        return f"{ci.diff:+.4f} (no spread the measurement resolves: {verdicts.NOT_ESTIMABLE})"
    return f"{ci.diff:+.4f} [{ci.lo:+.4f}, {ci.hi:+.4f}]"


def shown_interval(c: Comparison) -> tuple[float, float] | None:
    """The interval a comparison's verdict is read at: its Holm step's in a family of several
    tests (stats.holm_levels), else the 95% one; None without an estimable interval."""
    if c.ci is None or not c.ci.estimable:
        return None
    if c.family_size > 1 and c.holm_level is not None:
        return c.holm_lo, c.holm_hi
    return c.ci.lo, c.ci.hi


def fmt_comp_diff(c: Comparison) -> str:
    """a - b with the interval its verdict is read at, and that interval's level when it is a
    Holm step's: "+0.0100 [+0.0031, +0.0169] (98.3%, Holm step 2 of 3)"; a test after the step
    Holm stopped at says so (its verdict is inconclusive whatever its own p)."""
    shown = shown_interval(c)
    if shown is None or c.family_size <= 1 or c.holm_level is None:
        return fmt_diff(c.ci)
    text = f"{c.ci.diff:+.4f} [{shown[0]:+.4f}, {shown[1]:+.4f}] ({c.holm_level:.2%}, "
    if c.trend is not None:   # read across a budget sweep: Bonferroni over the family (report.verdicts.budget_trend)
        return text + f"Bonferroni over {c.family_size})"
    if c.holm_reached:
        return text + f"Holm step {c.holm_step} of {c.family_size})"
    return text + f"step {c.holm_step} of {c.family_size}; Holm stopped at an earlier test, step {c.holm_stop})"


MARGIN_FORMS = {"number": "a number > 0 (its unit)",
                "fraction": "{fraction: f, of: [NoPE row, RoPE row], end: lower} with f in (0, 1)",
                "relative": "{relative: r} with r in (0, 1)"}


def _real(x, lo: float = 0.0, hi: float = math.inf) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and lo < x < hi


def margin_rule(claim: dict, allowed: tuple[str, ...] = ("number", "fraction")) -> dict:
    """A claim's `margin` from paper_numbers.yaml, checked: {"number": m}, {"fraction": f,
    "of": [nope, rope], "end": None | "lower"} or {"relative": r}; a form not in `allowed`, or
    a malformed one, is a ReportError of one line naming the file, the claim and the key."""
    m = claim.get("margin")
    if "number" in allowed and _real(m):
        return {"number": float(m)}
    if isinstance(m, dict) and "relative" in allowed and set(m) == {"relative"} and _real(m["relative"], hi=1):
        return {"relative": float(m["relative"])}
    if isinstance(m, dict) and "fraction" in allowed and set(m) - {"end"} == {"fraction", "of"}:
        f, of, end = m["fraction"], m["of"], m.get("end")
        if (_real(f, hi=1) and isinstance(of, list) and len(of) == 2 and all(isinstance(x, str) for x in of)
                and end in MARGIN_ENDS):
            return {"fraction": float(f), "of": list(of), "end": end}
    forms = " or ".join(MARGIN_FORMS[x] for x in allowed)
    raise ReportError(f"paper_numbers.yaml: claim {claim.get('id', '?')}: key 'margin' must be {forms}; got {m!r}")


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
                         "family_size": comp.family_size, "mde": comp.mde, "holm_level": comp.holm_level,
                         "holm_lo": comp.holm_lo, "holm_hi": comp.holm_hi,
                         "margin": comp.margin, "verdict": verdicts.at_scale(comp.verdict, c.scale, c.regime),
                         "claim_verdict": c.shown, "scale": c.scale, "detail": comp.note,
                         "trend": comp.trend.text() if comp.trend is not None else None})
    cols = ["claim", "a", "relation", "b", "paired", "diff", "ci_lo", "ci_hi", "df", "p", "p_holm", "family_size", "mde",
            "holm_level", "holm_lo", "holm_hi", "margin",
            "verdict", "claim_verdict", "scale", "detail", "trend"]
    return pd.DataFrame.from_records(recs, columns=cols)
