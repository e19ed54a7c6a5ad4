"""The papers' claims judged on our runs: one ClaimResult per claim of paper_numbers.yaml.

The char-level claims (seeds 000/001: orderings, non-inferiority, parameter counts) are
judged here from the runs table; the seed 003 claims by report/lm.py and report/vision.py
from their sections; the seed 002 claims (a blog post without training runs) are tests of
the library and are listed as such. Every rule is in stats.py. `summary_frame` is the
report's summary table and tables/claims.csv (one row per claim); `pairs_frame` holds the
pairwise tests behind the orderings (tables/claims-pairs.csv).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from . import stats

# Where a claim's summary row links to, by kind, unless the claim names a `section`.
DEFAULT_SECTION = {"order": "claims", "noninferior": "claims", "count": "claims", "number": "claims",
                   "unit_test": "blog", "lm_bpb": "lm", "lm_core": "lm", "lm_count": "lm",
                   "vision_count": "vision", "vision_top1": "vision",
                   "study_wrap": "study-wrap", "study_gka_init": "study-gka-init", "study_prune": "study-prune"}
NEEDS = {"order": ("order",), "noninferior": ("rows", "margin"), "count": ("row", "field", "formula"),
         "number": ("row", "field", "paper_value"), "unit_test": ("test",), "lm_bpb": (), "lm_core": (),
         "lm_count": (), "vision_count": (), "vision_top1": (), "study_wrap": (), "study_gka_init": (),
         "study_prune": ("margin",)}
SUMMARY_COLUMNS = ["claim", "paper", "where", "statement", "paper_value", "ours", "estimate", "ci_lo", "ci_hi",
                   "interval", "verdict", "scale", "section"]


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

    @property
    def shown(self) -> str:
        return stats.at_scale(self.verdict, self.scale)

    @property
    def section(self) -> str:
        return self.claim.get("section") or DEFAULT_SECTION[self.claim["kind"]]

    def summary_record(self) -> dict:
        c = self.claim
        return {"claim": c["id"], "paper": c["paper"], "where": c["where"], "statement": c["statement"],
                "paper_value": _text(c.get("paper_value")), "ours": self.ours or "—", "estimate": self.estimate,
                "ci_lo": self.lo, "ci_hi": self.hi, "interval": self.interval, "verdict": self.shown,
                "scale": self.scale, "section": self.section}


def _text(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def fmt_diff(ci: stats.DiffCI) -> str:
    return f"{ci.diff:+.4f} [{ci.lo:+.4f}, {ci.hi:+.4f}]"


def unit_test_claim(claim: dict, scale: str) -> ClaimResult:
    return ClaimResult(claim, stats.NOT_MEASURED, scale=scale,
                       ours=f"unit-tested: tests/test_blog_claims.py ({claim['test']})",
                       detail="a property of the library, checked by the test suite, not by a training run")


def _seed_values(runs_df: pd.DataFrame) -> dict[str, dict[int, float]]:
    return {row: dict(zip(g["seed"].astype(int), g["val_loss"].astype(float)))
            for row, g in runs_df.groupby("row", sort=False)}


def _pair(values: dict[str, dict[int, float]], a: str, b: str) -> tuple[list[float], list[float], bool]:
    """The two rows' values; in seed order and paired when both have the same seeds."""
    sa, sb = values[a], values[b]
    if set(sa) == set(sb):
        seeds = sorted(sa)
        return [sa[s] for s in seeds], [sb[s] for s in seeds], True
    return list(sa.values()), list(sb.values()), False


def _interval_text(comps: list[stats.Comparison]) -> str:
    cis = [c.ci for c in comps if c.ci is not None]
    if not cis:
        return ""
    kind = "paired t over seeds (same batch order per seed)" if cis[0].paired else "Welch t over seeds"
    holm = ", Holm across the pairs" if len(comps) > 1 else ""
    return f"95% {kind}{holm}"


def _comparison_claim(claim: dict, values, missing_note, scale: str) -> ClaimResult:
    kind = claim["kind"]
    pairs = stats.ordering_pairs(claim["order"]) if kind == "order" else [tuple(claim["rows"])]
    absent = {x for pair in pairs for x in pair if x not in values}
    if absent:
        comps = [stats.Comparison(a, "<" if kind == "order" else "≲", b, stats.NOT_RUN,
                                  note="; ".join(missing_note(x) for x in (a, b) if x in absent))
                 for a, b in pairs]
        return ClaimResult(claim, stats.NOT_RUN, comps, scale=scale, ours="—")
    data = [_pair(values, a, b) for a, b in pairs]
    paired = all(p for _, _, p in data)
    if kind == "order":
        comps = stats.compare_ordering([(a, va, b, vb) for (a, b), (va, vb, _) in zip(pairs, data)],
                                       paired=paired)
    else:
        (a, b), (va, vb, _) = pairs[0], data[0]
        comps = [stats.compare_noninferior(a, va, b, vb, margin=float(claim["margin"]), paired=paired)]
    res = ClaimResult(claim, stats.combine([c.verdict for c in comps]), comps, scale=scale,
                      interval=_interval_text(comps))
    def point(a: str, b: str) -> str:  # one seed: the difference without an interval
        va, vb = values[a], values[b]
        return f"{sum(va.values()) / len(va) - sum(vb.values()) / len(vb):+.4f} (1 seed, no interval)"

    res.ours = "; ".join(f"{c.a} − {c.b}: " + (fmt_diff(c.ci) if c.ci else point(c.a, c.b)) for c in comps)
    if kind == "noninferior":
        res.ours += f"; margin {float(claim['margin']):.4f}"
    if len(comps) == 1 and comps[0].ci is not None:
        res.estimate, res.lo, res.hi = comps[0].ci.diff, comps[0].ci.lo, comps[0].ci.hi
    return res


def _fmt_count(v) -> str:
    return "—" if v is None else f"{v:,}" if isinstance(v, int) else str(v)


def _count_claim(claim: dict, ours, rows: dict, params, scale: str) -> ClaimResult:
    formula = claim["formula"]
    m = int(rows[claim["row"]].options.get("n_kernels", formula.get("n_kernels")))
    per = int(formula["per_kernel"])
    layers, heads = params.model.n_layer, params.model.n_head
    expected = per * m * layers * heads
    verdict = stats.BY_CONSTRUCTION if ours == expected else stats.CONTRADICTED
    detail = (f"expected {per}·M·layers·heads = {per}·{m}·{layers}·{heads} = {expected:,} at scale {scale!r}; "
              f"ours: {_fmt_count(ours)}; paper: {_fmt_count(claim.get('paper_value'))}"
              + ("" if verdict == stats.BY_CONSTRUCTION else "; our construction differs from the formula"))
    return ClaimResult(claim, verdict, detail=detail, scale=scale, ours=_fmt_count(ours),
                       estimate=float(ours) if isinstance(ours, (int, float)) else None)


def _number_claim(claim: dict, ours, scale: str) -> ClaimResult:
    paper_value = float(claim["paper_value"])
    tol = float(claim.get("rel_tol", 0.0))
    ok_number = isinstance(ours, (int, float)) and math.isfinite(ours)
    if claim.get("architecture"):
        verdict = stats.not_comparable(f"architecture differs: {' '.join(str(claim['architecture']).split())}")
    elif scale != stats.PAPER_SCALE:
        verdict = stats.not_comparable(f"a paper-scale number; this is scale {scale}")
    elif not ok_number:
        verdict = stats.INCONCLUSIVE
    else:
        ok = abs(float(ours) - paper_value) <= tol * abs(paper_value)
        verdict = stats.REPRODUCED if ok else stats.CONTRADICTED
    rel = f" ({(float(ours) - paper_value) / paper_value:+.1%})" if ok_number else ""
    detail = (f"paper: {_fmt_count(claim['paper_value'])}; ours: {_fmt_count(ours)}{rel}; "
              f"tolerance ±{tol:.0%} at paper scale")
    return ClaimResult(claim, verdict, detail=detail, scale=scale, ours=f"{_fmt_count(ours)}{rel}",
                       estimate=float(ours) if ok_number else None)


def evaluate_char_claims(papers: dict, params, runs_df: pd.DataFrame) -> list[ClaimResult]:
    """The claims of kinds order, noninferior, count, number and unit_test, in file order."""
    values = _seed_values(runs_df)
    rows = {r.name: r for r in params.matrix.rows}
    scale = params.scale

    def missing_note(name: str) -> str:
        if name in rows:
            return f"{name} is not in the matrix of scale {scale!r} (matrix.only)"
        return f"{name} is not a row of {params.path}"

    results = []
    for claim in papers["claims"]:
        kind = claim["kind"]
        if kind in ("order", "noninferior"):
            results.append(_comparison_claim(claim, values, missing_note, scale))
        elif kind == "unit_test":
            results.append(unit_test_claim(claim, scale))
        elif kind in ("count", "number"):
            row = claim["row"]
            if row not in values:
                results.append(ClaimResult(claim, stats.NOT_RUN, detail=missing_note(row), scale=scale, ours="—"))
                continue
            got = list(dict.fromkeys(runs_df.loc[runs_df["row"] == row, claim["field"]].tolist()))
            ours = got[0] if len(got) == 1 else None
            results.append(_count_claim(claim, ours, rows, params, scale) if kind == "count"
                           else _number_claim(claim, ours, scale))
    return results


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
                         "margin": comp.margin, "verdict": stats.at_scale(comp.verdict, c.scale),
                         "claim_verdict": c.shown, "scale": c.scale, "detail": comp.note})
    cols = ["claim", "a", "relation", "b", "paired", "diff", "ci_lo", "ci_hi", "df", "p", "p_holm", "margin",
            "verdict", "claim_verdict", "scale", "detail"]
    return pd.DataFrame.from_records(recs, columns=cols)
