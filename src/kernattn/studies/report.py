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
from ..report.claims import ClaimResult, fmt_diff, margin_rule
from ..report.part import ClaimKind, ReportContext
from . import bumpshift

OUTLINE = ("part-studies", "Studies: the experiments the papers leave open (issue 17)", (
    ("study-wrap", "Does the bump follow the line width? The line-wrap counterfactual (gpa-long, Section 3.2)"),
    ("study-gka-init", "GKA's bandwidth at initialisation (gka-paper gives none)"),
    ("study-prune", "Removing a weak head, then fine-tuning (gpa-long, Sections 3.1 and 4)")))
CLAIM_KINDS = {"study_wrap": ClaimKind("study-wrap"), "study_gka_init": ClaimKind("study-gka-init"),
               "study_prune": ClaimKind("study-prune", ("margin",))}
BASELINE_INIT = "1"  # sigma = 1: what gka-paper's code starts from


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
        init = [b for b in r.get("init_bumps", {}).values()]
        if init:  # the reference the trained bumps are read against
            rows.append({"row": r["row"], "corpus": "bank at initialisation", "newline_peak": None,
                         "bump": _ci(init), "bumps": init, "shift": None, "predicted": None, "paragraph": None,
                         "votes": False,
                         "verdict": "reference", "reason": r.get("premise_why", ""), "row_verdict": r["verdict"]})
        for c in [*r["corpora"], *({**x, "control": True} for x in r.get("controls", []))]:
            bumps = [b for b in c["bumps"].values()]
            rows.append({"row": r["row"], "corpus": c["corpus"], "newline_peak": c["newline_peak"],
                         "bump": _ci(bumps), "bumps": bumps, "shift": c.get("shift"),
                         "predicted": c.get("predicted_shift"), "paragraph": c.get("paragraph_shift"),
                         "votes": bool(c.get("votes")) and not c.get("control"),
                         "verdict": ("positive control: " if c.get("control") else "") + c.get("verdict", "reference"),
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


SUPPORTED, NOT_SUPPORTED = "supported", "not supported"


def sign_test(pairs: list[tuple[float, float]], alpha: float = stats.ONE_SIDED_ALPHA) -> dict:
    """The pre-specified test of the GKA-init study: over (test, baseline) pairs of one seed and
    track (lower is better), k = the pairs where the test init is lower, n = the pairs that
    differ (ties carry no sign); one-sided binomial p = P(X >= k | n, 1/2), at the project's
    one-sided 2.5%. "supported" when p < alpha, else "not supported"; "not judged" when even
    n of n could not reach alpha (fewer than 6 pairs: stats.sign_gate)."""
    n = sum(1 for a, b in pairs if a != b)
    k = sum(1 for a, b in pairs if a < b)
    p = stats.sign_test(k, n)[0]
    gate = stats.sign_gate(n, f"seed pair{'s' if n != 1 else ''} with a sign", alpha)
    return {"k": k, "n": n, "ties": len(pairs) - n, "p": p, "alpha": alpha,
            "verdict": gate or (SUPPORTED if p < alpha else NOT_SUPPORTED)}


def sign_pairs(by_track: dict, init: str) -> dict[str, list[tuple[float, float]]]:
    """Per track: (init's metric, sigma = 1's metric) of every seed that has both."""
    out = {}
    for track, by_init in by_track.items():
        if init in by_init and BASELINE_INIT in by_init:
            base = {r["seed"]: _metric(r, track) for r in by_init[BASELINE_INIT]}
            out[track] = [(_metric(r, track), base[r["seed"]]) for r in by_init[init] if r["seed"] in base]
    return out


def gka_context(summary: dict, sign_init: str = "sqrt_d") -> dict:
    """Per track: each init's metric with its interval and its paired difference from sigma = 1;
    the pre-specified sign test (`sign_init` against sigma = 1 over every track and seed); and
    Holm across every init of every track, shown beside it."""
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
    pairs = sign_pairs(by_track, sign_init)
    sign = {**sign_test([x for v in pairs.values() for x in v]), "init": sign_init,
            "per_track": {t: sum(a < b for a, b in v) for t, v in pairs.items()},
            "pairs_per_track": {t: len(v) for t, v in pairs.items()}}
    return {"present": True, "summary": summary, "verdict": verdict, "comparisons": comps, "tracks": tracks,
            "sign": sign}


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
def relative_margin(row: str, reference: list[float], r: float) -> tuple[float, str]:
    """(margin, why) of a `{relative: r}` margin: r x the mean validation loss of the
    architecture's unpruned reference arm (fine-tuned as long, without removal). The margin
    is read off that arm's runs, but its seed-to-seed error (~1e-3 of a loss) moves 1% of it
    by ~1e-5 nats, far below anything the test resolves."""
    mean = statistics.fmean(reference)
    return r * mean, (f"margin {r * mean:.4f} = {r:g} × {row}'s unpruned reference (control fine-tuned without "
                      f"removal) validation loss {mean:.4f}, mean of {stats.seeds_text(len(reference))}")


def _arch(row: str, runs: list[dict], threshold: float, margin: float | dict | None) -> dict:
    """One architecture's judgement: the premise, the cost without fine-tuning (the paper's
    "without any loss of performance in inference") and after it (against the control), each
    non-inferior at `margin` ({"relative": r}: relative_margin of this architecture's control),
    and the random-head control (weak cost < random cost)."""
    from .prune_study import row_premise

    met, why = row_premise(runs, threshold)
    col = {k: [r.get(k) for r in runs] for k in ("loss_before", "loss_after_removal", "loss_after_fine_tune",
                                                  "loss_control_fine_tune", "cost_after_removal",
                                                  "cost_after_fine_tune", "cost_random_after_removal",
                                                  "cost_random_after_fine_tune")}
    has_random = all(v is not None for v in col["cost_random_after_removal"])
    margin_why = None
    if isinstance(margin, dict):
        margin, margin_why = relative_margin(row, col["loss_control_fine_tune"], margin["relative"])
    comps = {}
    if margin is not None:
        comps["no_fine_tune"] = stats.compare_noninferior(
            f"{row}: removed, no fine-tuning", col["loss_after_removal"], f"{row}: before removal",
            col["loss_before"], margin, paired=True)
        comps["fine_tuned"] = stats.compare_noninferior(
            f"{row}: removed + fine-tuned", col["loss_after_fine_tune"], f"{row}: control fine-tuned",
            col["loss_control_fine_tune"], margin, paired=True)
    if has_random:
        for key, weak, rand in (("random_no_fine_tune", "cost_after_removal", "cost_random_after_removal"),
                                ("random_fine_tuned", "cost_after_fine_tune", "cost_random_after_fine_tune")):
            comps[key] = stats.compare_less(f"{row}: weakest-bank cost", col[weak], f"{row}: random-head cost",
                                            col[rand], paired=True)
    return {"row": row, "runs": len(runs), "seeds": sorted(r["seed"] for r in runs), "premise_met": met,
            "premise_why": why, "comparisons": comps, "margin": margin, "margin_why": margin_why,
            "cost_no_ft": stats.paired_diff_ci(col["loss_after_removal"], col["loss_before"]),
            "cost_ft": stats.paired_diff_ci(col["loss_after_fine_tune"], col["loss_control_fine_tune"]),
            "random_no_ft": _ci(col["cost_random_after_removal"]) if has_random else None,
            "random_ft": _ci(col["cost_random_after_fine_tune"]) if has_random else None}


def prune_context(summary: dict, margin: float | dict | None) -> dict:
    """The prune section; `margin` from prune_margin (a number, {"relative": r} set per
    architecture, or None). The page's one margin: the number, or each architecture's."""
    runs = summary["runs"]
    pruned = [r["loss_after_fine_tune"] for r in runs]
    control = [r["loss_control_fine_tune"] for r in runs]
    removal = stats.paired_diff_ci([r["loss_after_removal"] for r in runs], [r["loss_before"] for r in runs])
    tuned = stats.paired_diff_ci(pruned, control)
    archs = [_arch(row, [r for r in runs if r["row"] == row], summary["threshold"], margin)
             for row in dict.fromkeys(r["row"] for r in runs)]
    if isinstance(margin, dict):
        margin = (f"{margin['relative']:g} × each architecture's unpruned reference loss: "
                  + ", ".join(f"{a['row']} {a['margin']:.4f}" for a in archs))
    return {"present": True, "summary": summary, "runs": runs, "removal": removal, "tuned": tuned,
            "architectures": archs, "margin": margin,
            "params_saved": _ci(r["params_saved_fraction"] for r in runs),
            "flops_saved": _ci(r["flops_saved_fraction"] for r in runs)}


def prune_margin(claim: dict | None, params) -> tuple[float | dict | None, str]:
    """The prune claim's non-inferiority margin and how it was set (claims.margin_rule): a
    number fixed in paper_numbers.yaml; {"relative": r}, r (fixed there) x each architecture's
    unpruned reference loss, set per architecture (relative_margin); or a fraction (fixed
    there) of the char track's NoPE - RoPE gap at this scale (the rows' final validation
    losses, paired by seed: stats.noninferiority_margin). None, with the reason, when either
    row has no finished run here or the gap is not established. Any other form: ReportError."""
    if claim is None:
        return None, "no prune claim"
    m = margin_rule(claim, ("number", "relative", "fraction"))
    if "number" in m:
        return m["number"], f"margin {m['number']:.4f} (fixed)"
    if "relative" in m:
        return m, (f"margin {m['relative']:g} × each architecture's unpruned reference (control fine-tuned "
                   f"without removal) validation loss")
    from ..tracks.char import stages as char

    losses: dict[str, dict[int, float]] = {row: {} for row in m["of"]}
    for spec in char.runs(params):
        final = Path(char.final_output(params, spec.run_id))
        if spec.row in losses and final.is_file():
            losses[spec.row][spec.seed] = float(json.loads(final.read_text())["val_loss"])
    nope, rope = m["of"]
    seeds = sorted(losses[nope].keys() & losses[rope].keys())
    if not seeds:
        return None, f"no margin: {nope} and {rope} have no finished runs of one seed at scale {params.scale}"
    margin, why = stats.noninferiority_margin(m["fraction"], [losses[nope][k] for k in seeds],
                                              [losses[rope][k] for k in seeds], paired=True, end=m["end"])
    return margin, (f"margin {margin:.4f} = {why}" if margin is not None else f"no margin: {why}")


# ----------------------------------------------------------------------------- the part
def section(ctx: ReportContext) -> dict:
    """The three studies' contexts (each {"present": False, ...} when its summary is missing);
    their tables into ctx.tables."""
    params = ctx.params
    margin, margin_why = prune_margin(next(iter(ctx.claims_of(["study_prune"])), None), params)
    out = {"command": paths.command(), "params": params.studies}
    for key, study, build in (("wrap", "wrap", wrap_context), ("gka", "gka_init", lambda s: gka_context(s, params.studies.gka_init.sign_test)),
                              ("prune", "prune", lambda s: prune_context(s, margin) | {"margin_why": margin_why})):
        path = paths.summary_path(params, study)
        summary = _read(path)
        if summary is None or summary.get("scale") != params.scale:
            out[key] = {"present": False, "path": str(path)}
        else:
            out[key] = {**build(summary), "path": str(path)}
    if out["gka"]["present"] and out["gka"]["summary"]["runs"]:
        sigma_figure(ctx.assets / "study-gka-sigma.png", out["gka"]["summary"], params.scale)
        out["gka"]["figure"] = "assets/study-gka-sigma.png"
    for name, df in tables(out, params.scale).items():
        df.to_csv(ctx.tables / name, index=False)
    return out


def _ci_cols(prefix: str, ci) -> dict:
    """A mean-CI dict or a DiffCI as CSV columns (empty when there is none)."""
    if ci is None:
        return {f"{prefix}_mean": None, f"{prefix}_lo": None, f"{prefix}_hi": None}
    mean = ci["mean"] if isinstance(ci, dict) else ci.diff
    lo, hi = (ci["lo"], ci["hi"]) if isinstance(ci, dict) else (ci.lo, ci.hi)
    return {f"{prefix}_mean": mean, f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def tables(section: dict, scale: str) -> dict[str, "pd.DataFrame"]:
    """The studies part's tables as CSV frames (tables/<name>): every number the page shows,
    each test's verdict worded for the scale as the page words it (stats.at_scale)."""
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
             "test": stats.at_scale(r["verdict"], scale), **_ci_cols("val_loss", r["loss"]), **_ci_cols("top1_ema", r["top1"]),
             "sigma_start": " ".join(f"{v:.4g}" for v in r["sigma_start"]),
             "sigma_end": " ".join(f"{v:.4g}" for v in r["sigma_end"]),
             "diag_start": " ".join(f"{v:.4g}" for v in r["diag_start"]),
             "diag_end": " ".join(f"{v:.4g}" for v in r["diag_end"]), "grad_ratio_start": r["grad_ratio"]}
            for t in section["gka"]["tracks"] for r in t["table"]])
    if section.get("prune", {}).get("present"):
        keep = ("run_id", "row", "seed", "flagged_weak", "premise_met", "premise_why", "loss_before",
                "loss_after_removal", "loss_after_fine_tune", "loss_control_fine_tune", "cost_after_removal",
                "cost_after_fine_tune", "loss_random_after_removal", "loss_random_after_fine_tune",
                "cost_random_after_removal", "cost_random_after_fine_tune", "params_saved", "params_saved_fraction",
                "flops_saved_per_token", "flops_saved_fraction")
        out["study-prune.csv"] = pd.DataFrame([
            {**{k: r.get(k) for k in keep}, "removed": _heads(r["removed"]),
             "random_removed": _heads(r.get("random_removed", [])),
             "strength": " ".join(f"{v:.4g}" for v in r["strength"]),
             "zero_ablation": " ".join(f"{v:.6g}" for v in r["zero_ablation"]),
             "mean_ablation": " ".join(f"{v:.6g}" for v in r["mean_ablation"])} for r in section["prune"]["runs"]])
        out["study-prune-rows.csv"] = pd.DataFrame([_arch_columns(a, scale) for a in section["prune"]["architectures"]])
    return out


def _heads(heads: list[dict]) -> str:
    return " ".join(f"L{h['layer']}H{h['head']}" for h in heads)


def _arch_columns(a: dict, scale: str) -> dict:
    """One architecture's line of study-prune-rows.csv: its premise, costs and tests."""
    line = {"row": a["row"], "runs": a["runs"], "premise_met": a["premise_met"], "premise_why": a["premise_why"],
            **_ci_cols("cost_no_fine_tune", a["cost_no_ft"]), **_ci_cols("cost_fine_tuned", a["cost_ft"]),
            **_ci_cols("random_cost_no_fine_tune", a["random_no_ft"]),
            **_ci_cols("random_cost_fine_tuned", a["random_ft"])}
    for key, comp in a["comparisons"].items():
        line[f"test_{key}"] = stats.at_scale(comp.verdict, scale)
        line[f"test_{key}_mde"] = comp.mde  # minimum detectable effect at its seeds and spread (None: not estimable)
    return line


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


def named_init_readings(claim: dict, summary: dict, comparisons, scale: str = "paper") -> list[str]:
    """Per init the claim names (`inits`: label -> words, against `baseline`, sigma = 1's label
    "1"): the Holm family's verdict of that init against the baseline in each track (the
    secondary reading; `comparisons` are stats.init_family_comparisons', named "<track>: <init>"),
    or "not judged (init X not run at this scale)" where the study has no run of it. The baseline
    itself missing is said first: without it no init is compared. Verdicts as printed at `scale`."""
    ran = {r["init"] for r in summary.get("runs", [])}
    baseline = str(claim.get("baseline", "1"))
    out = [] if baseline in ran else [f"sigma = 1: {stats.not_judged(f'init {baseline} not run at this scale')}"]
    for init, words in claim.get("inits", {}).items():
        if init not in ran:
            out.append(f"{words}: {stats.not_judged(f'init {init} not run at this scale')}")
            continue
        own = [c for c in comparisons if c.a.rpartition(": ")[2] == init]
        tracks = ", ".join(f"{c.a.rpartition(': ')[0] or 'all'} {stats.at_scale(c.verdict, scale)}" for c in own)
        out.append(f"{words}: {tracks or stats.not_judged('no run of sigma = 1 to compare with')}")
    return out


def _gka_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    """Our hypothesis (gka-paper gives no init), judged by the pre-specified sign test:
    supported / not supported. The Holm family over every init is shown beside it."""
    sign = part["sign"]
    per = ", ".join(f"{t} {k}/{sign['pairs_per_track'][t]}" for t, k in sign["per_track"].items())
    tied = f"; {sign['ties']} tied" if sign["ties"] else ""
    ours = (f"sigma init {sign['init']} below sigma = 1 in {sign['k']} of {sign['n']} seed pairs ({per}{tied}); "
            f"one-sided sign test p = {sign['p']:.3g}")
    comps = [c for c in part["comparisons"] if c.ci is not None]
    holm = "; ".join(f"{c.a} − {c.b.rpartition(': ')[2]}: {fmt_diff(c.ci)}" for c in comps)
    units = "; ".join(f"{t['track']}: {t['metric_label']}" for t in part["tracks"])
    res = ClaimResult(claim, sign["verdict"], part["comparisons"], scale=scale, ours=ours,
                      detail=f"pre-specified sign test at {sign['alpha']:g}, lower is better ({units}); "
                             f"Holm across every init: {stats.at_scale(part['verdict'], scale)}" + (f" ({holm})" if holm else ""))
    # every init the statement names against sigma = 1, or why it was not (issue 37)
    res.detail += "; each init the statement names: " + "; ".join(
        named_init_readings(claim, part["summary"], part["comparisons"], scale))
    own = [c for c in comps if c.a.endswith(f": {sign['init']}")]
    if len(part["tracks"]) == 1 and own:  # one track: the tested init's paired difference, in its unit
        res.estimate, res.lo, res.hi = own[0].ci.diff, own[0].ci.lo, own[0].ci.hi
        res.interval = "95% paired t over seeds (beside the sign test)"
    return res


def premise_not_met(threshold: float, weakest: float) -> str:
    """The claim row's words when no architecture has a bank below the threshold."""
    return f"premise not met (no bank below threshold {threshold:g}; weakest {weakest:.3g})"


def _prune_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    """Judged on the architectures whose every run has a bank below the threshold (gpa-long's
    premise); their no-fine-tuning and fine-tuned costs, each non-inferior at the margin."""
    archs = part["architectures"]
    if not archs:
        return ClaimResult(claim, stats.NOT_RUN, scale=scale, ours="—", detail="no pruned run")
    s = part["summary"]
    judged = [a for a in archs if a["premise_met"]]
    if not judged:
        weakest = min(r.get("weakest_strength", min(r["strength"])) for r in part["runs"])
        return ClaimResult(claim, premise_not_met(s["threshold"], weakest), scale=scale,
                           ours="; ".join(f"{a['row']}: {a['premise_why']}" for a in archs),
                           detail="the k weakest heads were removed anyway; their costs are in the section")
    if part["margin"] is None:
        return ClaimResult(claim, stats.not_judged(part.get("margin_why", "no margin")), scale=scale,
                           ours="; ".join(f"{a['row']}: {a['premise_why']}" for a in judged),
                           detail="the costs without and after fine-tuning are in the section")
    comps = [a["comparisons"][k] for a in judged for k in ("no_fine_tune", "fine_tuned") if k in a["comparisons"]]
    ours = "; ".join(f"{c.a} − {c.b.rpartition(': ')[2]}: {fmt_diff(c.ci) if c.ci else 'no interval'}"
                     + (f", MDE {c.mde:.4f}" if c.mde is not None else "") for c in comps)
    skipped = [a["row"] for a in archs if not a["premise_met"]]
    own = [a["margin_why"] for a in judged if a.get("margin_why")]  # a relative margin: each architecture's
    detail = ("; ".join(own) if own else part.get("margin_why", f"margin {part['margin']}")) + (
        f"; premise not met, not judged: {', '.join(skipped)}" if skipped else "")
    res = ClaimResult(claim, stats.combine([c.verdict for c in comps]), comps, scale=scale, ours=ours,
                      detail=detail, interval="95% paired t over seeds of the cost without fine-tuning")
    first = judged[0]["comparisons"].get("no_fine_tune")
    if len(judged) == 1 and first is not None and first.ci is not None:  # the paper's "in inference" cost
        res.estimate, res.lo, res.hi = first.ci.diff, first.ci.lo, first.ci.hi
    return res
