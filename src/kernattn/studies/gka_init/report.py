"""The GKA bandwidth-init study's part of the report (gka-paper gives no init; the shape of
every part: report/part.py): its context, the sign test, the sigma figure and its claim, read
from <studies.out_dir>/gka_init/summary.json where the study ran (report_common.study_section).
Intervals (report/stats.py): a mean over seeds is Student t (mean_ci); a difference from
sigma = 1 is paired by seed (paired_diff_ci), Holm across the inits of every track together
(studies.init_family_comparisons). Claim kind study_gka_init (paper_numbers.yaml)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...report import stats, verdicts
from ...report.verdicts import budget_trend, gates, studies
from ...report.claims import ClaimResult, fmt_diff
from ...report.part import ClaimKind, ReportContext
from ..report_common import ci_cols, ci_of, study_claims, study_section, write_tables
from .stages import gka_run_dir

OUTLINE = ("part-study-gka-init", "Study: GKA's bandwidth at initialisation (gka-paper gives none)", (
    ("study-gka-init", "Every track's GKA row per init_sigma"),))
CLAIM_KINDS = {"study_gka_init": ClaimKind("study-gka-init")}
BASELINE_INIT = "1"  # sigma = 1: what gka-paper's code starts from


def _mean_grid(grids) -> list[float]:
    """Per layer: the mean over heads and runs of [layers][heads] grids."""
    arr = np.asarray(grids, dtype=np.float64)  # [runs, layers, heads]
    return arr.mean(axis=(0, 2)).tolist()


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
    return {"init": init, "metric": ci_of(_metric(r, track) for r in runs), "n": len(runs),
            "loss": ci_of(r["val_loss"] for r in runs),
            "top1": ci_of(r["top1_ema"] for r in runs) if track == "vision" else None,
            "diff": comp.ci if comp else None, "p_holm": comp.p_holm if comp else None,
            "verdict": comp.verdict if comp else "baseline",
            "sigma_start": _mean_grid([r["sigma_curve"][0]["sigma"] for r in runs]),
            "sigma_end": _mean_grid([r["sigma_end"] for r in runs]),
            "diag_start": _mean_grid([r["diag_start"] for r in runs]),
            "diag_end": _mean_grid([r["diag_end"] for r in runs]),
            "grad_ratio": stats.mean_of([g / w for r in runs for g, w in
                                  zip(r["grad_log_sigma_start"], r["grad_w_o_start"]) if w > 0])}


SUPPORTED, NOT_SUPPORTED = "supported", "not supported"


def sign_test(pairs: list[tuple[float, float]], alpha: float = verdicts.ONE_SIDED_ALPHA) -> dict:
    """The pre-specified test of the GKA-init study: over (test, baseline) pairs of one seed and
    track (lower is better), k = the pairs where the test init is lower, n = the pairs that
    differ (ties carry no sign); one-sided binomial p = P(X >= k | n, 1/2), at the project's
    one-sided 2.5%. "supported" when p < alpha, else "not supported"; "not judged" when even
    n of n could not reach alpha (fewer than 6 pairs: studies.sign_gate)."""
    n = sum(1 for a, b in pairs if a != b)
    k = sum(1 for a, b in pairs if a < b)
    p = studies.sign_test(k, n)[0]
    gate = studies.sign_gate(n, f"seed pair{'s' if n != 1 else ''} with a sign", alpha)
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
    verdict, comps = studies.init_family_comparisons(families) if families else (verdicts.NOT_RUN, [])
    found = {c.a: c for c in comps}
    tracks = []
    for track, by_init in by_track.items():
        label, model = TRACK_METRICS.get(track, ("final val loss", track))
        own = [c for c in comps if c.b == f"{track}: {baselines[track]}"]
        first = next(iter(by_init.values()))[0]
        tracks.append({"track": track, "model": model, "row": first["row"], "metric_label": label,
                       "baseline": baselines[track], "d_head": first["d_head"],
                       "verdict": studies.init_verdict(own), "seeds": sorted({r["seed"] for v in by_init.values() for r in v}),
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
    from ...tracks.char.analysis import plots

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


def named_init_readings(claim: dict, summary: dict, comparisons, scale: str = "paper") -> list[str]:
    """Per init the claim names (`inits`: label -> words, against `baseline`, sigma = 1's label
    "1"): the Holm family's verdict of that init against the baseline in each track (the
    secondary reading; `comparisons` are studies.init_family_comparisons', named "<track>: <init>"),
    or "not judged (init X not run at this scale)" where the study has no run of it. The baseline
    itself missing is said first: without it no init is compared. Verdicts as printed at `scale`."""
    ran = {r["init"] for r in summary.get("runs", [])}
    baseline = str(claim.get("baseline", "1"))
    out = [] if baseline in ran else [f"sigma = 1: {verdicts.not_judged(f'init {baseline} not run at this scale')}"]
    for init, words in claim.get("inits", {}).items():
        if init not in ran:
            out.append(f"{words}: {verdicts.not_judged(f'init {init} not run at this scale')}")
            continue
        own = [c for c in comparisons if c.a.rpartition(": ")[2] == init]
        tracks = ", ".join(f"{c.a.rpartition(': ')[0] or 'all'} {verdicts.at_scale(c.verdict, scale)}" for c in own)
        out.append(f"{words}: {tracks or verdicts.not_judged('no run of sigma = 1 to compare with')}")
    return out


def init_gap_gates(folder: Path, summary: dict, sign_init: str, th: gates.Thresholds,
                   floor: float = 0.0) -> dict[str, gates.Gate]:
    """Per track with both: "gap stable at this budget" on the sign test's init against sigma = 1
    (report.verdicts.gates.runs_gap_stable on the runs' training losses, which stand in for the final
    value compared, as for the LM and the ViT: paired by seed, against each run's lr.npy), the
    gate every comparison of two rows without a budget sweep passes before it is tested; the
    char track's room counted as at least `floor` (budget_trend's delta, nats per character).
    `folder`: the study's runs (<studies.out_dir>/gka_init/runs)."""
    out = {}
    for track, by_init in _by_track(summary).items():
        if sign_init in by_init and BASELINE_INIT in by_init:
            files = {init: {r["run_id"]: Path(folder) / r["run_id"] / "metrics.jsonl" for r in by_init[init]}
                     for init in (sign_init, BASELINE_INIT)}
            out[track] = gates.runs_gap_stable(sign_init, files[sign_init], BASELINE_INIT, files[BASELINE_INIT], th,
                                               floor=floor if track == "char" else 0.0)
    return out


def _gap_gate(part: dict) -> tuple[str | None, str]:
    """The failed gap gate's verdict (the first track's), or None, and what every track's read."""
    found = [gates.gate(g.name, g.passed, f"{t}: {g.why}") for t, g in part.get("gap_gates", {}).items()]
    return gates.withheld(found), "; ".join(g.why for g in found)


def _gka_claim(claim: dict, part: dict, scale: str) -> ClaimResult:
    """Our hypothesis (gka-paper gives no init), judged by the pre-specified sign test:
    supported / not supported, once the tested init's gap to sigma = 1 is stable at this budget
    (the gate every comparison without a budget sweep passes: init_gap_gates). The Holm family
    over every init is shown beside it."""
    sign = part["sign"]
    withheld, measured = _gap_gate(part)
    per = ", ".join(f"{t} {k}/{sign['pairs_per_track'][t]}" for t, k in sign["per_track"].items())
    tied = f"; {sign['ties']} tied" if sign["ties"] else ""
    ours = (f"sigma init {sign['init']} below sigma = 1 in {sign['k']} of {sign['n']} seed pairs ({per}{tied}); "
            f"one-sided sign test p = {sign['p']:.3g}")
    comps = [c for c in part["comparisons"] if c.ci is not None]
    holm = "; ".join(f"{c.a} − {c.b.rpartition(': ')[2]}: {fmt_diff(c.ci)}" for c in comps)
    units = "; ".join(f"{t['track']}: {t['metric_label']}" for t in part["tracks"])
    # the sign test's own gate (too few pairs to reach its level) first: then nothing could be read
    verdict = sign["verdict"] if verdicts.is_withheld(sign["verdict"]) else withheld or sign["verdict"]
    res = ClaimResult(claim, verdict, part["comparisons"], scale=scale, ours=ours,
                      detail=f"pre-specified sign test at {sign['alpha']:g}, lower is better ({units}); "
                             f"Holm across every init: {verdicts.at_scale(part['verdict'], scale)}" + (f" ({holm})" if holm else "")
                             + (f"; gap stable at this budget: {measured}" if measured else ""))
    # every init the statement names against sigma = 1, or why it was not (issue 37)
    res.detail += "; each init the statement names: " + "; ".join(
        named_init_readings(claim, part["summary"], part["comparisons"], scale))
    own = [c for c in comps if c.a.endswith(f": {sign['init']}")]
    if len(part["tracks"]) == 1 and own:  # one track: the tested init's paired difference, in its unit
        res.estimate, res.lo, res.hi = own[0].ci.diff, own[0].ci.lo, own[0].ci.hi
        res.interval = "95% paired t over seeds (beside the sign test)"
    return res


# ----------------------------------------------------------------------------- the part
def section(ctx: ReportContext) -> dict:
    """The study's context ({"present": False, ...} without its summary), its sigma figure into
    ctx.assets and its table into ctx.tables."""
    sign_init = ctx.params.studies.gka_init.sign_test
    out = study_section(ctx, "gka_init", lambda s: gka_context(s, sign_init))
    if out["present"]:
        out["gap_gates"] = init_gap_gates(gka_run_dir(ctx.params), out["summary"], sign_init,
                                          gates.thresholds(ctx.papers), budget_trend.rule(ctx.papers).delta)
    if out["present"] and out["summary"]["runs"]:
        sigma_figure(ctx.assets / "study-gka-sigma.png", out["summary"], ctx.params.scale)
        out["figure"] = "assets/study-gka-sigma.png"
    write_tables(ctx, tables(out, ctx.params.scale))
    return out


def tables(part: dict, scale: str) -> dict:
    """Every init of every track: its metric, its paired difference from sigma = 1 and the test
    (worded for the scale as the page words it: verdicts.at_scale), sigma and diagonal weight."""
    import pandas as pd

    if not part["present"]:
        return {}
    return {"study-gka-init.csv": pd.DataFrame([
        {"track": t["track"], "row": t["row"], "metric": t["metric_label"], "init": r["init"], "n": r["n"],
         **ci_cols("value", r["metric"]), **ci_cols("diff_vs_baseline", r["diff"]), "p_holm": r["p_holm"],
         "test": verdicts.at_scale(r["verdict"], scale), **ci_cols("val_loss", r["loss"]), **ci_cols("top1_ema", r["top1"]),
         "sigma_start": " ".join(f"{v:.4g}" for v in r["sigma_start"]),
         "sigma_end": " ".join(f"{v:.4g}" for v in r["sigma_end"]),
         "diag_start": " ".join(f"{v:.4g}" for v in r["diag_start"]),
         "diag_end": " ".join(f"{v:.4g}" for v in r["diag_end"]), "grad_ratio_start": r["grad_ratio"]}
        for t in part["tracks"] for r in t["table"]])}


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    return study_claims(ctx, CLAIM_KINDS, section, _gka_claim)
