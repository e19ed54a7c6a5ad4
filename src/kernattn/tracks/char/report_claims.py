"""The char track's claims (seeds 000 and 001) judged on its runs table: orderings and
"works as well as" between rows (pairwise t tests over seeds, stats.py), extra parameters by
construction (count) and the papers' model sizes (number)."""

from __future__ import annotations

import math

import pandas as pd

from ...report import stats
from ...report.claims import ClaimResult, fmt_diff


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


def judge(claims: list[dict], params, runs_df: pd.DataFrame) -> list[ClaimResult]:
    """Claims of kinds order, noninferior, count and number on the runs table, in their order."""
    values = _seed_values(runs_df)
    rows = {r.name: r for r in params.matrix.rows}
    scale = params.scale

    def missing_note(name: str) -> str:
        if name in rows:
            return f"{name} is not in the matrix of scale {scale!r} (matrix.only)"
        return f"{name} is not a row of {params.path}"

    results = []
    for claim in claims:
        kind = claim["kind"]
        if kind in ("order", "noninferior"):
            results.append(_comparison_claim(claim, values, missing_note, scale))
        else:  # count, number: a field of the row's final.json, the same for every seed
            row = claim["row"]
            if row not in values:
                results.append(ClaimResult(claim, stats.NOT_RUN, detail=missing_note(row), scale=scale, ours="—"))
                continue
            got = list(dict.fromkeys(runs_df.loc[runs_df["row"] == row, claim["field"]].tolist()))
            ours = got[0] if len(got) == 1 else None
            results.append(_count_claim(claim, ours, rows, params, scale) if kind == "count"
                           else _number_claim(claim, ours, scale))
    return results
