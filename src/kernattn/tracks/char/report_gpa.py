"""The char part's GPA sections: gpa-long's readings of trained kernel banks (3.1-3.2, 4) and
the reviewers' bank-size ablation, from the analysis stages' folders.

Reads <analysis.out_dir>/corpus/ (kernattn analyze-corpus) and <analysis.out_dir>/<run_id>/
(kernattn analyze-gpa) for every GPA run of the matrix; a missing or stale analysis (one
made from an earlier training of the run) is shown as a warning naming the command that
makes it, never dropped silently. Writes into the report folder: the per-run bank figures
(copied), Figure 5 per GPA row, the strength-vs-cost scatter and loss against M (drawn here),
and the tables as CSV (gpa-*.csv; per run: gpa-<run_id>-kernels.csv and the bank tables).

Numbers over seeds are mean +- the 95% Student t interval (report.stats.mean_ci), as in the
main table: per run the first-layer bump (the median over that layer's heads of each bank's
bump lag), the generated text's peak (with its bootstrap interval over streams) and
Spearman's rho between bank strength and head-removal cost.
"""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import report_bankgate, report_readings
from .analysis import plots
from .stages import SUMMARY, analysis_dir, corpus_dir, gpa_runs, run_dir
from .track import variant_lr_scale
from ...config import Params, RunSpec
from ...report import stats
from ...report.verdicts import gates
from ...report.palette import row_colors
from ...report.part import ReportContext

FULL_KERNEL_TABLE_MAX = 64  # show every kernel on the page up to this many (else: CSV + summary)
HIST_MAX_LAG = 200
SEED_COLOURS = [  # the seeds of one row (figure 5b); rows use palette.row_colors
               "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
               "tab:cyan", "tab:gray", "tab:blue"]


@dataclass
class RunAnalysis:
    spec: RunSpec
    folder: Path
    command: str
    summary: dict | None = None
    problem: str | None = None
    extra: dict = field(default_factory=dict)


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    if not path.is_file():
        return None, "missing"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"unreadable ({str(exc).splitlines()[0]})"
    return (doc, None) if isinstance(doc, dict) else (None, "not a JSON object")


def load_analyses(params: Params, params_file: str, finals: dict[str, dict]) -> list[RunAnalysis]:
    out = []
    for spec in gpa_runs(params):
        folder = analysis_dir(params, spec.run_id)
        cmd = f"kernattn analyze-gpa --params {params_file} --scale {params.scale} --run {spec.run_id}"
        ra = RunAnalysis(spec, folder, cmd)
        ra.summary, ra.problem = _read_json(folder / SUMMARY)
        if ra.summary is not None:
            fp = (finals.get(spec.run_id) or {}).get("fingerprint")
            if fp and ra.summary.get("fingerprint") != fp:
                ra.summary, ra.problem = None, "made from an earlier training of the run (fingerprint differs)"
        out.append(ra)
    return out


def _median(values):
    vals = [v for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


# ----------------------------------------------------------------------------- the section
def section(ctx: ReportContext, runs, main_df: pd.DataFrame) -> dict:
    """Figures and CSVs into ctx.assets and ctx.tables; returns the char template's `gpa`."""
    params, params_file, papers = ctx.params, ctx.params_file, ctx.papers
    interp = {key: None for key in ("corpus_newline_peak", "bank_bump", "generated_newline_peak",
                                    "redundant_heads", "bank_size")} | (papers.get("interpretability") or {})
    finals = {r.spec.run_id: r.final for r in runs}
    analyses = load_analyses(params, params_file, finals)
    warnings = [f"{a.folder / SUMMARY}: {a.problem}; make it with: {a.command}" for a in analyses if a.problem]
    corpus_summary, problem = _read_json(corpus_dir(params) / SUMMARY)
    corpus_counts = None
    if problem:
        warnings.insert(0, f"{corpus_dir(params) / SUMMARY}: {problem}; make it with: kernattn analyze-corpus "
                           f"--params {params_file} --scale {params.scale}")
        corpus_summary = None
    else:
        corpus_counts = pd.read_csv(corpus_dir(params) / "newlines.csv")["train"].to_numpy()
    assets, tables = ctx.assets, ctx.tables
    ok = [a for a in analyses if a.summary is not None]

    rows = []
    for name in dict.fromkeys(a.spec.row for a in analyses):
        members = [a for a in analyses if a.spec.row == name]
        rows.append(_row(name, members, assets, tables, corpus_counts, corpus_summary, interp, params,
                         gates.thresholds(papers)))
    bank_size = _bank_size(params, papers, main_df, runs, assets, tables)
    out = {
        "present": bool(analyses), "warnings": warnings, "paper": interp, "rows": rows,
        "corpus": corpus_summary["splits"]["train"] if corpus_summary else None,
        "corpus_val": corpus_summary["splits"].get("val") if corpus_summary else None,
        "n_analysed": len(ok), "n_gpa": len(analyses), "bank_size": bank_size,
        "heads_figure": _heads_figure(ok, assets, params) if ok else None,
        "heads_overall": _heads_overall(ok),
        "analysis_params": params.analysis,
        "timings": [{"run_id": a.spec.run_id, **dict.fromkeys(("total_s", "load_s", "banks_s", "sample_s", "heads_s",
                                                               "write_s")), **a.summary.get("timings", {})} for a in ok],
    }
    _tables(ok, corpus_summary, corpus_counts, tables)
    return out


def _row(name, members, assets, tables, corpus_counts, corpus_summary, interp, params, th) -> dict:
    first = members[0]
    ok = [a for a in members if a.summary is not None]
    row = {"row": name, "label": first.spec.label, "options": first.spec.options,
           "M": first.spec.options.get("n_kernels", 64), "combine": first.spec.options.get("combine", "add"),
           "runs": [], "init_png": None, "fig5": None}
    for a in members:
        rec = {"run_id": a.spec.run_id, "seed": a.spec.seed, "ok": a.summary is not None, "problem": a.problem}
        if a.summary is not None:
            rec.update(_run_record(a, assets, tables, params, th))
            if row["init_png"] is None:  # the init does not depend on the seed (gpa-long's init)
                row["init_png"] = _copy(a.folder / "banks_init.png", assets / f"gpa-{name}-banks_init.png")
        row["runs"].append(rec)
    done = [r for r in row["runs"] if r["ok"]]
    # A reading an analysis could not make is None in its summary.json; a NaN there is left out
    # like None (as this part always did): one run's undefined reading keeps no row's interval.
    row["bump_ci"] = stats.mean_ci_of((r["bump_l1"] for r in done), skip_nonfinite=True)
    row["gen_ci"] = stats.mean_ci_of((r["gen_peak"] for r in done), skip_nonfinite=True)
    row["rho_ci"] = stats.mean_ci_of((r["rho"] for r in done), skip_nonfinite=True)
    if ok:
        row["fig5"] = _figure5(name, first.spec.label, ok, assets, corpus_counts, corpus_summary, interp)
    return row


def _copy(src: Path, dest: Path) -> str | None:
    if not src.is_file():
        return None
    shutil.copyfile(src, dest)
    return f"assets/{dest.name}"


def _run_record(a: RunAnalysis, assets: Path, tables: Path, params, th) -> dict:
    s = a.summary
    rid = a.spec.run_id
    csvs = {}
    for name in ("kernels", "banks_trained", "banks_init"):
        src = a.folder / f"{name}.csv"
        if src.is_file():
            shutil.copyfile(src, tables / f"gpa-{rid}-{name}.csv")
            csvs[name] = f"tables/gpa-{rid}-{name}.csv"
    kernels = pd.read_csv(a.folder / "kernels.csv") if (a.folder / "kernels.csv").is_file() else pd.DataFrame()
    dominant = []
    if not kernels.empty:
        # the kernel with the largest weight sigma^2 (its share of G at lag 0) per bank
        for (layer, head), g in kernels.groupby(["layer", "head"], sort=True):
            k = g.loc[g["sigma"].idxmax()]
            dominant.append({"layer": int(layer), "head": int(head), "n": len(g),
                             **{c: (None if pd.isna(k[c]) else float(k[c])) for c in
                                ("kernel", "sigma", "length", "alpha", "tau", "period")}})
    full = (kernels.replace({np.nan: None}).to_dict("records")
            if 0 < len(kernels) <= FULL_KERNEL_TABLE_MAX else None)
    h, g = s["heads"], s["generated"]
    l1 = s["bumps"]["trained"][0]
    gate = report_bankgate.bank_gate(kernels, a.spec.options, params.train, th, run_dir(params, rid),
                                     variant_lr_scale(a.spec, params.train))   # the run's own factor
    banks = a.folder / "banks_trained.csv"
    layer1 = report_readings.layer1_similarity(pd.read_csv(banks)) if banks.is_file() else None
    return {
        "bank_converged": gate.passed, "bank_gate": gate.why, "layer1": layer1,
        "trained_png": _copy(a.folder / "banks_trained.png", assets / f"gpa-{rid}-banks_trained.png"),
        "csv": csvs, "dominant": dominant, "kernels_full": full,
        "bumps_l1": l1, "bumps_init_l1": s["bumps"]["init"][0],
        "bump_l1": _median(b["lag"] if b else None for b in l1),
        "gen_peak": g["peak"], "gen_peak_ci": g.get("peak_ci"), "gen_newlines": g["newlines"],
        "gen_chars": g["chars"], "gen_separations": g["separations"],
        "rho": h.get("spearman_rho"), "p": h.get("spearman_p"), "weakest": h.get("weakest"),
        "weakest_is_cheapest": h.get("weakest_is_cheapest"), "flagged": h.get("flagged", []),
        "flagged_among_cheapest": h.get("flagged_among_cheapest"),
        "base_loss": h.get("base_loss"), "final_val_loss": h.get("final_val_loss"),
        "per_head": h.get("per_head", []), "total_s": s.get("timings", {}).get("total_s"),
    }


# ----------------------------------------------------------------------------- figures
def _figure5(name, label, ok, assets, corpus_counts, corpus_summary, interp) -> dict:
    a = ok[0]
    shapes = pd.read_csv(a.folder / "banks_trained.csv")
    l1 = shapes[[c for c in shapes.columns if c.startswith("L1H")]].to_numpy().T
    fig = plots.new_figure(12, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    plots.draw_banks(ax1, l1, bumps=a.summary["bumps"]["trained"][0])
    paper_bump = (interp.get("bank_bump") or {}).get("value")
    if paper_bump is not None and paper_bump < l1.shape[1]:
        ax1.axvspan(paper_bump - 0.5, paper_bump + 0.5, color="0.6", alpha=0.35, lw=0, label=f"paper: lag {paper_bump}")
    ax1.legend(fontsize=7)
    ax1.set_title(plots.wrap(f"(a) first-layer banks of {a.spec.run_id} (dots: bumps)", 60), fontsize=9)
    series = []
    if corpus_counts is not None:
        series.append(("training corpus", corpus_counts, corpus_summary["splits"]["train"]["peak"], "tab:blue"))
    for i, r in enumerate(ok):
        counts = pd.read_csv(r.folder / "newlines_generated.csv")["count"].to_numpy()
        series.append((f"sampled, {r.spec.run_id}", counts, r.summary["generated"]["peak"],
                       SEED_COLOURS[i % len(SEED_COLOURS)]))
    max_lag = min(HIST_MAX_LAG, min(len(c) for _, c, _, _ in series) - 1)
    plots.draw_newline_histograms(ax2, series, max_lag, (interp.get("generated_newline_peak") or {}).get("value"))
    ax2.set_title("(b) separations between newlines: corpus and sampled text", fontsize=9)
    fig.suptitle(plots.wrap(f"gpa-long Figure 5, from our runs: {label}", 110), fontsize=10)
    fname = f"gpa-fig5-{name}.png"
    fig.savefig(assets / fname, dpi=100)
    return {"file": f"assets/{fname}", "title": f"Figure 5 analogue: {label}"}


def _heads_figure(ok, assets, params) -> dict:
    """(a) strength against cost, every head of every run; (b) the same as ranks within each
    model, which is what Spearman's rho measures (strength scales differ between models)."""
    from scipy.stats import rankdata

    fig = plots.new_figure(13, 4.8)
    ax, ax2 = fig.subplots(1, 2, width_ratios=[1.25, 1])
    colours = row_colors(params)  # the row's colour in every figure of the report
    markers = ["o", "s", "^", "D", "v"]
    jitter = np.random.default_rng(0)
    for a in ok:
        style = {"color": colours[a.spec.row],
                 "marker": markers[a.spec.seed % len(markers)], "alpha": 0.8, "s": 22}
        ph = a.summary["heads"]["per_head"]
        strength, cost = [p["strength"] for p in ph], [p["cost"] for p in ph]
        ax.scatter([max(x, 1e-4) for x in strength], cost,
                   label=f"{a.spec.run_id} (rho {_fmt(a.summary['heads']['spearman_rho'])})", **style)
        ax2.scatter(rankdata(strength) + jitter.uniform(-0.15, 0.15, len(ph)),
                    rankdata(cost) + jitter.uniform(-0.15, 0.15, len(ph)), **style)
    ax.axvline(params.analysis.strength_threshold, color="0.4", ls="--", lw=1,
               label=f"weak-bank threshold {params.analysis.strength_threshold:g}")
    ax.axhline(0, color="0.7", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("bank strength: span of the bank's logit bias over lags (nats, log scale)")
    ax.set_ylabel("cost of removing the head:\nΔ validation MCE (nats/char)")
    ax.grid(alpha=0.3)
    ax.set_title("(a) every head of every GPA run", fontsize=9)
    n = max(len(a.summary["heads"]["per_head"]) for a in ok)
    ax2.plot([1, n], [1, n], color="0.6", lw=1, ls=":")
    ax2.set_xlabel("rank of the bank's strength within its model (1 = weakest)")
    ax2.set_ylabel("rank of the removal cost within its model (1 = cheapest)")
    ax2.grid(alpha=0.3)
    ax2.set_title("(b) ranks within each model (the claim: on the diagonal)", fontsize=9)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=6.5, loc="outside right upper")
    fig.suptitle(f"Bank strength vs cost of removing the head [scale {params.scale}]", fontsize=10)
    fig.savefig(assets / "gpa-heads.png", dpi=100)
    return {"file": "assets/gpa-heads.png", "title": "Bank strength against the cost of removing the head"}


def _heads_overall(ok) -> dict | None:
    """The claim over every analysed run: how often rho > 0 and the weakest head is the cheapest.
    Strengths are not pooled across runs (their scale grows with M and differs between add
    and mult); each run's rho is one observation."""
    if not ok:
        return None
    rhos = [a.summary["heads"].get("spearman_rho") for a in ok]
    h = [a.summary["heads"] for a in ok]
    return {"n": len(ok), "rho_ci": stats.mean_ci_of(rhos, skip_nonfinite=True),  # as section(): NaN left out
            "positive": sum(r is not None and r > 0 for r in rhos),
            "defined": sum(r is not None for r in rhos),
            "weakest_cheapest": sum(bool(x.get("weakest_is_cheapest")) for x in h),
            "flagged": sum(len(x.get("flagged", [])) for x in h),
            "heads": sum(x.get("n_heads", 0) for x in h)}


def _fmt(x) -> str:
    return "—" if x is None else f"{x:+.2f}"


def _bank_size(params, papers, main_df, runs, assets, tables) -> dict:
    spec = (papers.get("interpretability") or {}).get("bank_size") or {}
    options = {r.name: r.options for r in params.matrix.rows}
    recs = []
    for name in spec.get("rows", []):
        line = main_df[main_df["row"] == name]
        m = (options.get(name) or {}).get("n_kernels")
        if line.empty:
            recs.append({"row": name, "M": m, "run": False, "n": 0, "label": name, "mean": None, "half": None,
                         "lo": None, "hi": None, "seeds": []})
            continue
        r = line.iloc[0]
        half = None if pd.isna(r["val_mce_ci_half"]) else float(r["val_mce_ci_half"])
        recs.append({"row": name, "M": m, "run": True, "n": int(r["n_seeds"]), "label": r["label"],
                     "mean": float(r["val_mce_mean"]), "half": half,
                     "lo": None if half is None else float(r["val_mce_ci_lo"]),
                     "hi": None if half is None else float(r["val_mce_ci_hi"]),
                     "seeds": [float(x.final["val_loss"]) for x in runs if x.spec.row == name]})
    done = [r for r in recs if r["run"]]
    out = {"rows": recs, "note": spec.get("note", ""), "where": spec.get("where", ""), "figure": None}
    if not recs:
        return out
    pd.DataFrame([{k: v for k, v in r.items() if k != "seeds"} | {"seed_losses": " ".join(f"{x:.6f}" for x in r["seeds"])}
                  for r in recs]).to_csv(tables / "gpa-bank-size.csv", index=False)
    if done:
        fig = plots.new_figure(6.5, 4.2)
        ax = fig.subplots()
        ms = [r["M"] for r in done]
        colours = row_colors(params)  # each M is a row of the matrix: its colour in every figure
        ax.plot(ms, [r["mean"] for r in done], "-", color="0.6", lw=1)
        for r in done:
            ax.errorbar([r["M"]], [r["mean"]], yerr=[r["half"] or 0], fmt="o", color=colours[r["row"]], capsize=4,
                        label=f"{r['row']}: mean ± 95% CI over seeds")
            ax.plot([r["M"]] * len(r["seeds"]), r["seeds"], "x", color="tab:gray", ms=6)
        ax.plot([], [], "x", color="tab:gray", label="seeds")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.set_xlabel("kernels per head M (log scale)")
        ax.set_ylabel("final validation MCE (nats/char)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(plots.wrap(f"Bank-size ablation: GPA (add, no RoPE) against M [scale {params.scale}]", 70),
                     fontsize=9)
        fig.savefig(assets / "gpa-bank-size.png", dpi=110)
        out["figure"] = {"file": "assets/gpa-bank-size.png", "title": "Validation loss against the bank size M"}
    return out


def _tables(ok, corpus_summary, corpus_counts, tables) -> None:
    if ok:
        pd.DataFrame([{"run_id": a.spec.run_id, "row": a.spec.row, "seed": a.spec.seed, "stage": stage,
                       "layer": l + 1, "head": h + 1, **(b or {"lag": None})}
                      for a in ok for stage in ("init", "trained")
                      for l, layer in enumerate(a.summary["bumps"][stage]) for h, b in enumerate(layer)]
                     ).to_csv(tables / "gpa-bumps.csv", index=False)
        pd.DataFrame([{"run_id": a.spec.run_id, "row": a.spec.row, "seed": a.spec.seed, **p}
                      for a in ok for p in a.summary["heads"]["per_head"]]).to_csv(tables / "gpa-heads.csv", index=False)
        pd.DataFrame([{"run_id": a.spec.run_id, "row": a.spec.row, "seed": a.spec.seed,
                       **{k: v for k, v in a.summary["generated"].items() if k != "peak_ci"},
                       "peak_ci_lo": (a.summary["generated"]["peak_ci"] or [None, None])[0],
                       "peak_ci_hi": (a.summary["generated"]["peak_ci"] or [None, None])[1]}
                      for a in ok]).to_csv(tables / "gpa-generated.csv", index=False)
    if corpus_counts is not None:
        pd.DataFrame({"separation": np.arange(len(corpus_counts)), "train": corpus_counts}).to_csv(
            tables / "gpa-corpus-newlines.csv", index=False)
