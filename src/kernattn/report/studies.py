"""The report's studies part (issue 17): the line-wrap counterfactual, GKA's bandwidth at
initialisation, removing a weak head. Read from each study's summary.json under
studies.out_dir when it exists (`snakemake --cores all studies` writes them; the report reads
what exists, so the main DAG's report builds without them); a missing study is a section
saying how to produce it, and its summary row reads "not run".

Intervals (report/stats.py): a mean over seeds is Student t (mean_ci); a difference between
two inits, or between the pruned and the control fine-tuning, is paired (same seed, same
batches: paired_diff_ci). The claims (paper_numbers.yaml kinds study_wrap, study_gka_init,
study_prune) are judged by stats.reading_verdict, stats.init_comparisons and
stats.compare_noninferior.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from .. import studies as paths
from ..analysis import bumpshift
from . import stats
from .claims import ClaimResult, fmt_diff

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


def gka_context(summary: dict) -> dict:
    by_init: dict[str, list[dict]] = {}
    for r in summary["runs"]:
        by_init.setdefault(r["init"], []).append(r)
    values = {k: {r["seed"]: r["val_loss"] for r in runs} for k, runs in by_init.items()}
    baseline = BASELINE_INIT if BASELINE_INIT in values else next(iter(values))
    verdict, comps = stats.init_comparisons(baseline, values)
    diffs = {c.a: c for c in comps}
    table = []
    for init, runs in by_init.items():
        c = diffs.get(init)
        table.append({"init": init, "loss": _ci(r["val_loss"] for r in runs), "n": len(runs),
                      "diff": c.ci if c else None, "p_holm": c.p_holm if c else None,
                      "verdict": c.verdict if c else "baseline",
                      "sigma_start": _mean_grid([r["sigma_curve"][0]["sigma"] for r in runs]),
                      "sigma_end": _mean_grid([r["sigma_end"] for r in runs]),
                      "diag_start": _mean_grid([r["diag_start"] for r in runs]),
                      "diag_end": _mean_grid([r["diag_end"] for r in runs]),
                      "grad_ratio": _fmean([g / w for r in runs for g, w in
                                            zip(r["grad_log_sigma_start"], r["grad_w_o_start"]) if w > 0])})
    return {"present": True, "summary": summary, "baseline": baseline, "verdict": verdict, "comparisons": comps,
            "table": table, "values": values, "d_head": summary["runs"][0]["d_head"] if summary["runs"] else None}


def sigma_figure(path: Path, summary: dict, scale: str) -> None:
    """Sigma per head over training, one panel per init (every seed; one colour per head)."""
    from ..analysis import plots

    inits = list(dict.fromkeys(r["init"] for r in summary["runs"]))
    fig = plots.new_figure(3.2 * len(inits), 3.2)
    axes = np.atleast_1d(fig.subplots(1, len(inits), sharey=True))
    for ax, init in zip(axes, inits):
        for r in (r for r in summary["runs"] if r["init"] == init):
            steps = [c["step"] for c in r["sigma_curve"]]
            grid = np.asarray([c["sigma"] for c in r["sigma_curve"]], dtype=np.float64)  # [steps, layers, heads]
            for layer in range(grid.shape[1]):
                for head in range(grid.shape[2]):
                    ax.plot(steps, grid[:, layer, head], lw=0.9, color=f"C{layer * grid.shape[2] + head}",
                            ls="-" if r["seed"] == 0 else "--",
                            label=f"L{layer + 1}H{head + 1}" if r["seed"] == 0 else None)
        ax.set_title(f"init {init}", fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        ax.set_yscale("log")
    axes[0].set_ylabel("sigma (log scale)", fontsize=8)
    axes[-1].legend(fontsize=6, ncol=2)
    fig.suptitle(plots.wrap(f"GKA bandwidth per head over training, char GPT [scale {scale}]; "
                            "solid: seed 0, dashed: other seeds"), fontsize=8)
    fig.savefig(path, dpi=100)


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
def section(folder: Path, params, papers: dict | None = None) -> dict:
    """The three studies' contexts (each {"present": False, ...} when its summary is missing)."""
    margin = next((float(c["margin"]) for c in (papers or {}).get("claims", []) if c["kind"] == "study_prune"), None)
    cmd = paths.command()
    ctx = {"command": cmd, "params": params.studies}
    for key, study, build in (("wrap", "wrap", wrap_context), ("gka", "gka_init", gka_context),
                              ("prune", "prune", lambda s: prune_context(s, margin))):
        path = paths.summary_path(params, study)
        summary = _read(path)
        if summary is None or summary.get("scale") != params.scale:
            ctx[key] = {"present": False, "path": str(path)}
        else:
            ctx[key] = {**build(summary), "path": str(path)}
    if ctx["gka"]["present"] and ctx["gka"]["summary"]["runs"]:
        (folder / "assets").mkdir(parents=True, exist_ok=True)
        sigma_figure(folder / "assets" / "study-gka-sigma.png", ctx["gka"]["summary"], params.scale)
        ctx["gka"]["figure"] = "assets/study-gka-sigma.png"
    return ctx


def claims(ctx: dict | None, claim_list: list[dict], scale: str) -> list[ClaimResult]:
    out = []
    for claim in claim_list:
        part = (ctx or {}).get({"study_wrap": "wrap", "study_gka_init": "gka", "study_prune": "prune"}[claim["kind"]])
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
    ours = "; ".join(f"{c.a} − {c.b}: {fmt_diff(c.ci)}" for c in comps) or "1 seed: no interval"
    res = ClaimResult(claim, part["verdict"], part["comparisons"], scale=scale, ours=ours,
                      interval="95% paired t over seeds, Holm across the inits" if comps else "")
    if comps:
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
