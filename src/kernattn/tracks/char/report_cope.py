"""The CoPE control's verdict (issue 50, claim kind `cope_newlines`): do CoPE's learned positions
count newlines? If gpa-long's lag-70 bump is a paragraph or line scale, a model that may count
any tokens it likes should learn to count the newlines.

Reads each CoPE run's newline reading (kernattn analyze-cope: analysis/cope.py, the share of
each head's gate mass on newline keys, the content-blind share and their ratio). The rule
(paper_numbers.yaml, pre-registered 2026-12-02 before any CoPE run): a head counts newlines when
share >= min_share; a seed says yes when some head of some layer does; every seed yes -> holds,
none -> contradicted, a split -> inconclusive; fewer than verdicts.MIN_SEEDS runs read -> not
judged. The heads with enrichment >= min_enrichment are printed beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ...report import verdicts
from ...report.claims import ClaimResult
from .stages import cope_output

KIND = "cope_newlines"


def verdict(per_seed: dict[str, list[dict]], min_share: float) -> str:
    """The pre-registered rule over the runs read (run id -> its heads' readings)."""
    if len(per_seed) < verdicts.MIN_SEEDS:
        return verdicts.not_judged(verdicts.seeds_text(len(per_seed)))
    says = [any(h["share"] >= min_share for h in heads) for heads in per_seed.values()]
    return verdicts.HOLDS if all(says) else verdicts.CONTRADICTED if not any(says) else verdicts.INCONCLUSIVE


def _read(params, run_ids: list[str]) -> tuple[dict[str, list[dict]], list[str]]:
    per_seed, why = {}, []
    for run_id in run_ids:
        path = Path(cope_output(params, run_id))
        try:
            per_seed[run_id] = json.loads(path.read_text())["heads"]
        except (OSError, ValueError, KeyError) as exc:
            why.append(f"{run_id}: no reading in {path} ({type(exc).__name__}; kernattn analyze-cope --run {run_id})")
    return per_seed, why


def judge(claim: dict, params, runs_df: pd.DataFrame, scale: str) -> ClaimResult:
    """The claim on every finished run of its row (runs_df: the char report's runs table)."""
    run_ids = list(runs_df.loc[runs_df["row"] == claim["row"], "run_id"]) if len(runs_df) else []
    if not run_ids:
        return ClaimResult(claim, verdicts.NOT_RUN, scale=scale, ours="—",
                           detail=f"{claim['row']} is not a row trained at this scale")
    per_seed, why = _read(params, run_ids)
    min_share, min_enr = float(claim["min_share"]), float(claim["min_enrichment"])
    best = {r: max(heads, key=lambda h: h["share"]) for r, heads in per_seed.items() if heads}
    ours = "; ".join(f"{r}: largest newline share {h['share']:.3f} (layer {h['layer']} head {h['head']}, "
                     f"{h['enrichment']:.1f}x the content-blind {h['blind']:.3f}); heads enriched >= {min_enr:g}x: "
                     f"{sum(x['enrichment'] >= min_enr for x in per_seed[r])} of {len(per_seed[r])} heads"
                     for r, h in best.items()) or "—"
    detail = (f"rule: a head counts newlines when >= {min_share:g} of its gate mass is on newline keys; "
              f"{sum(any(h['share'] >= min_share for h in hs) for hs in per_seed.values())} of {len(per_seed)} "
              f"seeds have one (kernattn analyze-cope: analysis.streams validation windows of the context)"
              + (f"; not read: {'; '.join(why)}" if why else ""))
    estimate = (sum(h["share"] for h in best.values()) / len(best)) if best else None
    return ClaimResult(claim, verdict(per_seed, min_share), scale=scale, ours=ours, estimate=estimate, detail=detail)
