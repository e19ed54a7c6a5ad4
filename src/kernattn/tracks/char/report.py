"""The char track's part of the report (gpa-short and gpa-long: the char-level GPT with GPA kernel
banks), in the shape of every part (kernattn.report.part): the main table (one line per row
of the matrix: mean and 95% interval over seeds), the validation curves, the papers' claims
pair by pair with the setup beside ours, the GPA sections; its runs and corpus in the page's
header and provenance section (provenance.html.j2).

Reads every run's final.json and metrics.jsonl (report_runs.py: a missing or bad one is a
ReportError naming the command that makes it), the corpus's meta.json when present, and the
GPA analyses (report_gpa.py: a missing one is a warning naming its command). Writes
tables/main.csv, runs.csv, setup.csv, the gpa-*.csv tables and the figures
(report_figures.py, report_gpa.py). Judges the claims of kinds order, noninferior, count and
number (report_claims.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from . import (report_budgets, report_claims, report_cope, report_figures, report_gpa, report_readings,
               report_runs, stages)
from ...report import gka_state
from ...report.verdicts import gates, stability
from ...report.claims import ClaimResult, fmt_value
from ...report.part import ClaimKind, Input, Provenance, ReportContext

OUTLINE = ("part-char", "Char-level GPT with GPA kernel banks (gpa-short and gpa-long)", (
    ("main", "Validation loss per configuration"),
    ("figures", "Validation curves"),
    ("claims", "The papers' claims, pair by pair, and the setup"),
    ("gpa-banks", "GPA kernel banks: shapes at initialisation and after training (gpa-long, Section 3.1, Figures 3 and 4)"),
    ("gpa-bump", "The bump and the newline histogram (gpa-long, Section 3.2, Figure 5)"),
    ("gpa-heads", "Redundant heads: is a weak bank a head that can go? (gpa-long, Sections 3.1 and 4)"),
    ("gpa-bank-size", "Bank-size ablation: validation loss against M (the reviewers' request)")))
CLAIM_KINDS = {
    "order": ClaimKind("claims", ("order",)),
    "noninferior": ClaimKind("claims", ("rows", "margin")),   # margin: nats/char or {fraction, of: [NoPE, RoPE]}
    "count": ClaimKind("claims", ("row", "field", "formula")),
    "number": ClaimKind("claims", ("row", "field", "paper_value")),
    # gpa-long's readings of the corpus and the trained banks (report_readings.py)
    "corpus_peak": ClaimKind("gpa-bump", ("paper_value", "tolerance")),
    "generated_peak": ClaimKind("gpa-bump", ("row", "tolerance")),
    "last_layer_bank": ClaimKind("gpa-heads", ("row",)),
    "layer1_banks": ClaimKind("gpa-banks", ("row", "min_correlation", "max_spread")),
    "layer1_bump": ClaimKind("gpa-bump", ("row", "tolerance")),
    "strength_cost": ClaimKind("gpa-heads"),
    "char_stable": ClaimKind("claims"),   # gka-paper's "trains stably" on our char GKA rows (report.verdicts.stability)
    "cope_newlines": ClaimKind("claims", ("row", "min_share", "min_enrichment")),   # the CoPE control (report_cope)
}


def section(ctx: ReportContext) -> dict:
    p = ctx.params
    runs = report_runs.load_runs(p, ctx.params_file)
    runs_df = report_runs.runs_table(runs, ctx)
    main_df = report_runs.add_curve_columns(report_runs.main_table(p, runs_df), runs, ctx.papers)
    meta_path = Path(stages.data_outputs(p)[3])  # meta.json: the corpus's provenance (not its arrays)
    meta = report_runs.read_meta(meta_path)
    setup = report_runs.setup_table(ctx.papers, p, meta)
    main_df.to_csv(ctx.tables / "main.csv", index=False)
    runs_df.drop(columns=["mlflow_url"]).to_csv(ctx.tables / "runs.csv", index=False)
    setup.to_csv(ctx.tables / "setup.csv", index=False)
    return {
        "rows": _rows(main_df, runs_df, ctx.papers),
        "figures": report_figures.plot_figures(ctx.assets, p, ctx.papers, runs, main_df),
        "gpa": report_gpa.section(ctx, runs, main_df),
        "papers": ctx.papers.get("papers", {}),
        "setup_html": setup.map(fmt_value).to_html(index=False, border=0, classes="num-table"),
        "setup_source": ctx.papers.get("setup", {}).get("source", ""),
        "runs": runs_df.to_dict("records"),
        "runs_df": runs_df,  # for claims()
        "curves": report_runs.val_curves(runs),
        "gka_notes": _gka_notes(p, runs),
        "judged_loss": ctx.papers.get("judged_loss", "final"),
        "other_loss": "best" if ctx.papers.get("judged_loss", "final") == "final" else "final",
        "gates": gates.thresholds(ctx.papers),
        "provenance": _provenance(ctx, runs_df, meta, meta_path),
    }


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    readings = ctx.claims_of(report_readings.KINDS)
    stable = ctx.claims_of(("char_stable",))
    cope = ctx.claims_of((report_cope.KIND,))
    compared = [c for c in ctx.claims_of(CLAIM_KINDS) if c not in readings and c not in stable and c not in cope]
    converged = report_claims.convergence(section["runs_df"], section["curves"], ctx.papers, ctx.params)
    judged = report_claims.judge(compared, ctx.params, section["runs_df"], ctx.papers, section["curves"])
    p = ctx.params
    arms = report_budgets.recipe_arm(p.matrix.rows, p.train.variant_lr_scale, section["runs_df"])
    _budget_table(ctx, section["runs_df"], judged, arms)
    results = (judged + report_readings.judge(readings, _papers_recipe(section["gpa"], arms), ctx.params, converged)
               + [_stable(c, ctx, section["runs_df"]) for c in stable]
               + [report_cope.judge(c, p, section["runs_df"], ctx.scale) for c in cope])
    trained = regime(ctx.params)
    for res in results:
        if res.claim["kind"] not in ("count", "number"):   # those hold by construction, at any length
            res.regime = trained
    return results


def _papers_recipe(gpa: dict, arms: report_budgets.RecipeArms | None) -> dict:
    """The GPA part with only the rows trained at the papers' recipe (variant lr x1) where the
    scale trains another arm too (`arms`: report_budgets.recipe_arm): a reading over "every GPA
    run" pools one recipe, the verdict's."""
    if arms is None:
        return gpa
    return {**gpa, "rows": [r for r in gpa.get("rows", []) if arms.primary.get(r["row"], r["row"]) == r["row"]]}


def regime(params) -> str:
    """How far the scale's longest run trains, in passes over the training split: what a verdict
    below the paper scale rests on (the papers' runs: hundreds of passes). "" without the prepared
    data's meta.json (n_train)."""
    meta = stages.data_dir(params) / "meta.json"
    try:
        n_train = json.loads(meta.read_text())["n_train"]
    except (OSError, ValueError, KeyError):
        return ""
    tp, mp = params.train, params.model
    epochs = tp.max_steps * tp.batch_size * mp.context / max(1, n_train)
    return f"early training, {epochs:.2g} epoch{'s' if epochs >= 2 else ''}"


def _budget_table(ctx: ReportContext, runs_df: pd.DataFrame, judged: list,
                  arms: report_budgets.RecipeArms | None) -> None:
    """tables/budget-gaps.csv: every compared gap (and its rows' twins' at the other recipe) at
    every budget of the scale's budget sweep; nothing without one."""
    p = ctx.params
    if not p.train.budgets:
        return
    values = report_budgets.budget_values(p, runs_df)
    pairs = [(c.a, c.b) for res in judged for c in res.comparisons]   # the papers' recipe's rows
    if arms is not None:   # and their twins at the other factor
        other = arms.other
        pairs += [(other.get(a, a), other.get(b, b)) for a, b in pairs if other.get(a, a) and other.get(b, b)]
    trained = set(runs_df["row"]) if len(runs_df) else set()
    pairs = [pair for pair in dict.fromkeys(pairs) if set(pair) <= trained]   # a claim not run here has no gaps
    report_budgets.gap_table(values, report_budgets.budgets_of(p), pairs).to_csv(ctx.tables / "budget-gaps.csv",
                                                                                 index=False)


def _stable(claim: dict, ctx: ReportContext, runs_df: pd.DataFrame) -> ClaimResult:
    """"GKA trains stably" over every char GKA run: the matrix's and the GKA-init study's
    (report_runs.gka_records; report.verdicts.stability)."""
    records = report_runs.gka_records(ctx.params, runs_df)
    return stability.judge(claim, records, stability.rule(ctx.papers), ctx.scale)


def _gka_notes(p, runs: list) -> list[dict]:
    """Beside each GKA row that starts at sigma = 1: its sigma at the end (every seed's
    checkpoint); the char track measures no attention weights (no diagonal weight)."""
    out = []
    for row in p.matrix.rows:
        got = [r for r in runs if r.spec.row == row.name]
        if not got or not gka_state.starts_at_one(row.variant, row.options):
            continue
        read = [gka_state.checkpoint_sigma(r.folder / "ckpt.pt") for r in got]
        sigma = [x for s in read if s for x in s]
        out.append({"row": row.name, "text": gka_state.sigma_text(
            sigma or None, None, f"ckpt.pt of {sum(1 for s in read if s)} of {len(got)} runs")})
    return out


def _rows(main_df: pd.DataFrame, runs_df: pd.DataFrame, papers: dict) -> list[dict]:
    """The main table's rows for the template: the CSV's numbers (NaN as None), the papers the
    row comes from, and its seeds with their MLflow runs."""
    rows = []
    for _, r in main_df.iterrows():
        g = runs_df[runs_df["row"] == r["row"]]
        rows.append({
            **{k: (None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v) for k, v in r.items()},
            "sources": _sources(r["source"], papers),
            "seeds": [{"run_id": s["run_id"], "seed": s["seed"], "url": s["mlflow_url"],
                       "mlflow_run_id": s["mlflow_run_id"], "val_loss": s["val_loss"]} for _, s in g.iterrows()],
        })
    return rows


def _sources(source: str, papers: dict) -> list[dict]:
    out = []
    for part in str(source).replace(",", "/").split("/"):
        part = part.strip()
        paper = papers.get("papers", {}).get(part)
        out.append({"id": part, "title": paper["title"] if paper else ""})
    return out


def _provenance(ctx: ReportContext, runs_df: pd.DataFrame, meta: dict | None, meta_path: Path) -> Provenance:
    p, digest = ctx.params, ctx.params.digest()
    m, t = p.model, p.train

    def distinct(column: str) -> list[str]:
        return list(dict.fromkeys(str(v) for v in runs_df[column] if v))
    return Provenance(
        summary=(f"{m.n_layer} layers x {m.n_head} heads, d={m.d_model}, context {m.context}; "
                 f"{t.max_steps:,} steps of batch {t.batch_size}; seeds {', '.join(map(str, p.matrix.seeds))}"),
        commits=distinct("git_commit"), devices=list(dict.fromkeys(str(d) for d in runs_df["device"])),
        torch_versions=distinct("torch_version"), tracking_uris=distinct("tracking_uri"),
        stale=[r for r, d in zip(runs_df["run_id"], runs_df["params_digest"]) if d != digest],
        inputs=[Input("Corpus", str(meta_path), meta, f"kernattn prepare --params {ctx.params_file} --scale {ctx.scale}")])
