"""The report's studies part (issue 17; the shape of every part: report/part.py): the
line-wrap counterfactual, GKA's bandwidth at initialisation, removing a weak head. Read from
each study's summary.json under studies.out_dir when it exists (`snakemake --cores all
studies` writes them; the report reads what exists, so the main DAG's report builds without
them); a missing study is a section saying how to produce it, and its summary row reads "not
run".

Intervals (report/stats.py): a mean over seeds is Student t (mean_ci); a difference between
two inits, or between the pruned and the control fine-tuning, is paired (same seed, same
batches: paired_diff_ci). The claims (paper_numbers.yaml kinds study_wrap, study_gka_init,
study_prune) are judged by stats.reading_verdict, stats.init_family_comparisons (the GKA
inits of every track, one Holm family) and stats.compare_noninferior.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from .. import studies as paths
from ..report import stats
from ..report.claims import ClaimResult, fmt_diff
from ..report.part import ClaimKind, ReportContext
from ..tracks.char.analysis import bumpshift

OUTLINE = ("part-studies", "Studies: the experiments the papers leave open (issue 17)", (
    ("study-wrap", "Does the bump follow the line width? The line-wrap counterfactual (seed 001, Section 3.2)"),
    ("study-gka-init", "GKA's bandwidth at initialisation (seed 003 gives none)"),
    ("study-prune", "Removing a weak head, then fine-tuning (seed 001, Sections 3.1 and 4)")))
CLAIM_KINDS = {"study_wrap": ClaimKind("study-wrap"), "study_gka_init": ClaimKind("study-gka-init"),
               "study_prune": ClaimKind("study-prune", ("margin",))}
BASELINE_INIT = "1"  # sigma = 1: what seed 003's code starts from


def _read(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _ci(values) -> dict | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    ci = stats.mean_ci(vals)
    return {"n": ci.n, "mean": ci.mean, "lo": ci.lo, "hi": ci.hi}


# ----------------------------------------------------------------------------- wrap
def wrap_context(summary: dict) -> dict:
    corpora = summary["corpora"]
    peaks = [{"corpus": c, **summary["peaks"][c]} for c in corpora]
    rows = []
    for r in summary["rows"]:
        for c in r["corpora"]:
            bumps = [b for b in c["bumps"].values()]
            rows.append({"row": r["row"], "corpus": c["corpus"], "newline_peak": c["newline_peak"],
                         "bump": _ci(bumps), "bumps": bumps, "shift": c.get("shift"),
                         "predicted": c.get("predicted_shift"), "verdict": c.get("verdict", "reference"),
                         "reason": c.get("reason", ""), "row_verdict": r["verdict"]})
    return {"present": True, "summary": summary, "peaks": peaks, "table": rows}


# ----------------------------------------------------------------------------- GKA init
def _mean_grid(grids) -> list[float]:
    """Per layer: the mean over heads and runs of [layers][heads] grids."""
    arr = np.asarray(grids, dtype=np.float64)  # [runs, layers, heads]
    return arr.mean(axis=(0, 2)).tolist()


def _fmean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


TRACK_ORDER = ("char", "lm", "vision")
# How the report names each track's model and what its runs are compared on (_metric).
TRACK_METRICS = {
    "char": ("final val loss (nats/char)", "char GPT"),
    "lm": ("final val loss (nats/token)", "nanochat LM"),
    "vision": ("final top-1 error, EMA weights (%)", "ViT"),
}


def _metric(run: dict, track: str) -> float:
    """The value compared between inits, lower better: the ViT's EMA top-1 error, else the loss."""
    return 100.0 - run["top1_ema"] if track == "vision" else run["val_loss"]


def _by_track(summary: dict) -> dict[str, dict[str, list[dict]]]:
    """{track: {init: [runs]}} in the tracks' fixed order (a summary from before the LM and
    vision tracks joined has char runs only, without a track field)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for r in summary["runs"]:
        out.setdefault(r.get("track", "char"), {}).setdefault(r["init"], []).append(r)
    return {t: out[t] for t in sorted(out, key=lambda t: TRACK_ORDER.index(t) if t in TRACK_ORDER else 99)}


def _init_row(init: str, runs: list[dict], track: str, comp) -> dict:
    return {"init": init, "metric": _ci(_metric(r, track) for r in runs), "n": len(runs),
            "loss": _ci(r["val_loss"] for r in runs),
            "top1": _ci(r["top1_ema"] for r in runs) if track == "vision" else None,
            "diff": comp.ci if comp else None, "p_holm": comp.p_holm if comp else None,
            "verdict": comp.verdict if comp else "baseline",
            "sigma_start": _mean_grid([r["sigma_curve"][0]["sigma"] for r in runs]),
            "sigma_end": _mean_grid([r["sigma_end"] for r in runs]),
            "diag_start": _mean_grid([r["diag_start"] for r in runs]),
            "diag_end": _mean_grid([r["diag_end"] for r in runs]),
            "grad_ratio": _fmean([g / w for r in runs for g, w in
                                  zip(r["grad_log_sigma_start"], r["grad_w_o_start"]) if w > 0])}


def gka_context(summary: dict) -> dict:
    """Per track: each init's metric with its interval and its paired difference from sigma = 1;
    one verdict for the study, Holm across every init of every track."""
    by_track = _by_track(summary)
    families, baselines = {}, {}
    for track, by_init in by_track.items():
        values = {k: {r["seed"]: _metric(r, track) for r in runs} for k, runs in by_init.items()}
        baselines[track] = BASELINE_INIT if BASELINE_INIT in values else next(iter(values))
        families[track] = (baselines[track], values)
    verdict, comps = stats.init_family_comparisons(families) if families else (stats.NOT_RUN, [])
    found = {c.a: c for c in comps}
    tracks = []
    for track, by_init in by_track.items():
        label, model = TRACK_METRICS.get(track, ("final val loss", track))
        own = [c for c in comps if c.b == f"{track}: {baselines[track]}"]
        first = next(iter(by_init.values()))[0]
        tracks.append({"track": track, "model": model, "row": first["row"], "metric_label": label,
                       "baseline": baselines[track], "d_head": first["d_head"],
                       "verdict": stats.init_verdict(own), "seeds": sorted({r["seed"] for v in by_init.values() for r in v}),
                       "table": [_init_row(init, runs, track, found.get(f"{track}: {init}"))
                                 for init, runs in by_init.items()]})
    return {"present": True, "summary": summary, "verdict": verdict, "comparisons": comps, "tracks": tracks}


def sigma_figure(path: Path, summary: dict, scale: str) -> None:
    """Sigma per head over training: one row of panels per track, one panel per init (every
    seed; one colour per head)."""
    from ..tracks.char.analysis import plots

    by_track = _by_track(summary)
    inits = list(dict.fromkeys(r["init"] for r in summary["runs"]))
    fig = plots.new_figure(3.2 * len(inits), 2.9 * len(by_track))
    axes = np.atleast_2d(fig.subplots(len(by_track), len(inits), sharey="row", squeeze=False))
    for row_axes, (track, by_init) in zip(axes, by_track.items()):
        for ax, init in zip(row_axes, inits):
            runs = by_init.get(init, [])
            first_seed = min((r["seed"] for r in runs), default=0)
            for r in runs:
                _sigma_lines(ax, r, solid=r["seed"] == first_seed)
            ax.set_title(f"{TRACK_METRICS.get(track, ('', track))[1]}, init {init}", fontsize=8)
            ax.set_yscale("log")
        row_axes[0].set_ylabel("sigma (log scale)", fontsize=8)
        row_axes[-1].legend(fontsize=5, ncol=2)
    for ax in axes[-1]:
        ax.set_xlabel("step", fontsize=8)
    fig.suptitle(plots.wrap(f"GKA bandwidth per head over training [scale {scale}]; "
                            "solid: the first seed, dashed: the others"), fontsize=8)
    fig.savefig(path, dpi=100)


def _sigma_lines(ax, run: dict, solid: bool) -> None:
    steps = [c["step"] for c in run["sigma_curve"]]
    grid = np.asarray([c["sigma"] for c in run["sigma_curve"]], dtype=np.float64)  # [steps, layers, heads]
    for layer in range(grid.shape[1]):
        for head in range(grid.shape[2]):
            ax.plot(steps, grid[:, layer, head], lw=0.9, color=f"C{(layer * grid.shape[2] + head) % 10}",
                    ls="-" if solid else "--", label=f"L{layer + 1}H{head + 1}" if solid else None)


# ----------------------------------------------------------------------------- prune
def prune_context(summary: dict, margin: float | None) -> dict:
    runs = summary["runs"]
    pruned = [r["loss_after_fine_tune"] for r in runs]
    control = [r["loss_control_fine_tune"] for r in runs]
    removal = stats.paired_diff_ci([r["loss_after_removal"] for r in runs], [r["loss_before"] for r in runs])
    tuned = stats.paired_diff_ci(pruned, control)
    comp = (stats.compare_noninferior("pruned + fine-tuned", pruned, "control fine-tuned", control, margin,
                                      paired=True) if margin is not None and runs else None)
    return {"present": True, "summary": summary, "runs": runs, "removal": removal, "tuned": tuned,
            "comparison": comp, "margin": margin,
            "params_saved": _ci(r["params_saved_fraction"] for r in runs),
            "flops_saved": _ci(r["flops_saved_fraction"] for r in runs)}


# ----------------------------------------------------------------------------- the part
def section(ctx: ReportContext) -> dict:
    """The three studies' contexts (each {"present": False, ...} when its summary is missing);
    their tables into ctx.tables."""
    params = ctx.params
    margin = next((float(c["margin"]) for c in ctx.claims_of(["study_prune"])), None)
    out = {"command": paths.command(), "params": params.studies}
    for key, study, build in (("wrap", "wrap", wrap_context), ("gka", "gka_init", gka_context),
                              ("prune", "prune", lambda s: prune_context(s, margin))):
        path = paths.summary_path(params, study)
        summary = _read(path)
        if summary is None or summary.get("scale") != params.scale:
            out[key] = {"present": False, "path": str(path)}
        else:
            out[key] = {**build(summary), "path": str(path)}
    if out["gka"]["present"] and out["gka"]["summary"]["runs"]:
        sigma_figure(ctx.assets / "study-gka-sigma.png", out["gka"]["summary"], params.scale)
        out["gka"]["figure"] = "assets/study-gka-sigma.png"
    for name, df in tables(out).items():
        df.to_csv(ctx.tables / name, index=False)
    return out


def _ci_cols(prefix: str, ci) -> dict:
    """A mean-CI dict or a DiffCI as CSV columns (empty when there is none)."""
    if ci is None:
        return {f"{prefix}_mean": None, f"{prefix}_lo": None, f"{prefix}_hi": None}
    mean = ci["mean"] if isinstance(ci, dict) else ci.diff
    lo, hi = (ci["lo"], ci["hi"]) if isinstance(ci, dict) else (ci.lo, ci.hi)
    return {f"{prefix}_mean": mean, f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def tables(section: dict) -> dict[str, "pd.DataFrame"]:
    """The studies part's tables as CSV frames (tables/<name>): every number the page shows."""
    import pandas as pd

    out = {}
    if section.get("wrap", {}).get("present"):
        w = section["wrap"]
        out["study-wrap-peaks.csv"] = pd.DataFrame(w["peaks"])
        out["study-wrap.csv"] = pd.DataFrame([
            {"row": r["row"], "corpus": r["corpus"], "newline_peak": r["newline_peak"], **_ci_cols("bump", r["bump"]),
             "bumps": " ".join(map(str, r["bumps"])), "predicted_shift": r["predicted"],
             **_ci_cols("shift", r["shift"]), "verdict": r["verdict"], "reason": r["reason"]} for r in w["table"]])
    if section.get("gka", {}).get("present"):
        out["study-gka-init.csv"] = pd.DataFrame([
            {"track": t["track"], "row": t["row"], "metric": t["metric_label"], "init": r["init"], "n": r["n"],
             **_ci_cols("value", r["metric"]), **_ci_cols("diff_vs_baseline", r["diff"]), "p_holm": r["p_holm"],
             "test": r["verdict"], **_ci_cols("val_loss", r["loss"]), **_ci_cols("top1_ema", r["top1"]),
             "sigma_start": " ".join(f"{v:.4g}" for v in r["sigma_start"]),
             "sigma_end": " ".join(f"{v:.4g}" for v in r["sigma_end"]),
             "diag_start": " ".join(f"{v:.4g}" for v in r["diag_start"]),
             "diag_end": " ".join(f"{v:.4g}" for v in r["diag_end"]), "grad_ratio_start": r["grad_ratio"]}
            for t in section["gka"]["tracks"] for r in t["table"]])
    if section.get("prune", {}).get("present"):
        keep = ("run_id", "flagged_weak", "loss_before", "loss_after_removal", "loss_after_fine_tune",
                "loss_control_fine_tune", "cost_after_fine_tune", "params_saved", "params_saved_fraction",
                "flops_saved_per_token", "flops_saved_fraction")
        out["study-prune.csv"] = pd.DataFrame([
            {**{k: r.get(k) for k in keep}, "removed": " ".join(f"L{h['layer']}H{h['head']}" for h in r["removed"]),
             "strength": " ".join(f"{v:.4g}" for v in r["strength"]),
             "zero_ablation": " ".join(f"{v:.6g}" for v in r["zero_ablation"]),
             "mean_ablation": " ".join(f"{v:.6g}" for v in r["mean_ablation"])} for r in section["prune"]["runs"]])
    return out


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    scale = ctx.scale
    out = []
    for claim in ctx.claims_of(CLAIM_KINDS):
        part = section.get({"study_wrap": "wrap", "study_gka_init": "gka", "study_prune": "prune"}[claim["kind"]])
        if not part or not part["present"]:
            out.append(ClaimResult(claim, stats.NOT_RUN, scale=scale, ours="—",
                                   detail=f"produce it with: {paths.command()}"))
        elif claim["kind"] == "study_wrap":
            out.append(_wrap_claim(claim, part, scale))
        elif claim["kind"] == "study_gka_init":
            out.append(_gka_claim(claim, part, scale))
        else:
            out.append(_prune_claim(claim, part, scale))
    return out


def _wrap_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    s = part["summary"]
    verdict = stats.reading_verdict(s["verdict"], bumpshift.STAYS, bumpshift.TRACKS)
    voting = [r for r in part["table"] if r["shift"] is not None]
    ours = "; ".join(f"{r['row']} {r['corpus']}: shift {r['shift']['mean']:+.1f} [{r['shift']['lo']:+.1f}, "
                     f"{r['shift']['hi']:+.1f}] lags, line prediction {r['predicted']:+d}" for r in voting)
    res = ClaimResult(claim, verdict, scale=scale, ours=ours or f"no interval ({s['verdict']})",
                      detail=s["verdict"], interval="95% paired t over seeds of the bump's shift, ± tol lags")
    if len(voting) == 1:
        res.estimate, res.lo, res.hi = voting[0]["shift"]["mean"], voting[0]["shift"]["lo"], voting[0]["shift"]["hi"]
    return res


def _gka_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    comps = [c for c in part["comparisons"] if c.ci is not None]
    ours = "; ".join(f"{c.a} − {c.b.rpartition(': ')[2]}: {fmt_diff(c.ci)}" for c in comps) or "1 seed: no interval"
    units = "; ".join(f"{t['track']}: {t['metric_label']}" for t in part["tracks"])
    res = ClaimResult(claim, part["verdict"], part["comparisons"], scale=scale, ours=ours,
                      detail=f"lower is better ({units})",
                      interval="95% paired t over seeds, Holm across the inits of every track" if comps else "")
    if len(part["tracks"]) == 1 and comps:  # one track: the best init's difference in one unit
        best = min(comps, key=lambda c: c.ci.diff)
        res.estimate, res.lo, res.hi = best.ci.diff, best.ci.lo, best.ci.hi
    return res


def _prune_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    comp = part["comparison"]
    if comp is None:
        return ClaimResult(claim, stats.NOT_RUN, scale=scale, ours="—", detail="no pruned run")
    res = ClaimResult(claim, comp.verdict, [comp], scale=scale, interval="95% paired t over the pruned runs")
    if comp.ci is not None:
        res.ours = f"pruned − control after fine-tuning: {fmt_diff(comp.ci)}; margin {comp.margin:.4f}"
        res.estimate, res.lo, res.hi = comp.ci.diff, comp.ci.lo, comp.ci.hi
    else:
        r = part["runs"][0]
        res.ours = f"{r['cost_after_fine_tune']:+.4f} (1 run, no interval)"
    return res
