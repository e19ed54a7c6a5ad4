"""gka-paper's claims about how GKA trains and runs in a ViT beside top-1 (issues 25 and 37):

    vision_stable   "GKA trains stably in DeiT-style ViTs": every run of every GKA row, by the
                    rule of report.verdicts.stability (fixed in paper_numbers.yaml `stability:`).
    vision_sigma    "learned bandwidths specialize across heads" (Sections 1 and 7.3): per seed
                    of the row that trains GKA-Ti (its `paper` field), the median over layers of
                    the widest head's sigma over the narrowest (final.json's sigma); claimed
                    above the claim's `min_ratio`, fixed in paper_numbers.yaml before the runs.
                    A one-sample t test over seeds (comparisons.judge_family on the per-seed ratios
                    paired with the constant threshold), with its gates: seeds, spread, and
                    the bandwidths converged (report.verdicts.gates.params_converged: log sigma moved
                    from its initial value by less than max_param_travel of Adam's travel,
                    the sum of the learning rates the run logged; and report.verdicts.gates.run_settled:
                    the same over the last part of training, read from the run's
                    param_trace.npz).
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

from ...attention.options import DEFAULT_INIT_SIGMA, initial_log_sigma
from ...report import stats, verdicts
from ...report.verdicts import comparisons, gates, stability
from ...report.claims import ClaimResult, paper_row
from . import stages

MODEL = "GKA-Ti"  # the row whose sigma is read: the one naming Table 5's GKA-Ti


def _record(params, run_id: str) -> stability.TrainRecord:
    return stability.read_record(stages.run_dir(params, run_id) / "metrics.jsonl")


def stable_claim(claim: dict, params, papers: dict, scale: str, finals: dict) -> ClaimResult:
    """Every finished run (a final.json: `finals`) of every GKA row of vision.rows
    (stages.attention_of: the registry's gka)."""
    gka = {r.name for r in params.vision.rows if stages.attention_of(r) == "gka"}
    records = [(s.run_id, _record(params, s.run_id)) for s in stages.runs(params) if s.row in gka and s.run_id in finals]
    return stability.judge(claim, records, stability.rule(papers), scale)


def head_ratio(sigma: list[list[float]]) -> float:
    """The median over layers of max / min sigma across the heads of a layer."""
    if not sigma or any(len(layer) < 2 for layer in sigma):
        raise ValueError(f"sigma needs at least two heads in every layer, got {sigma!r}")
    return float(statistics.median(max(layer) / min(layer) for layer in sigma))


def sigma_moved(sigma: list[list[float]], init_sigma, d_head: int) -> list[float] | None:
    """|log sigma - log sigma_0| of every head; None when the start came from the data (median)."""
    if init_sigma == "median":
        return None
    log0 = initial_log_sigma(init_sigma, d_head)
    return [abs(math.log(s) - log0) for layer in sigma for s in layer]


def _converged(params, row, runs: list[str], finals: dict, th: gates.Thresholds) -> str | None:
    """The withheld verdict of the first run whose bandwidths have not settled, or None."""
    vp = params.vision
    init = row.options.get("init_sigma", DEFAULT_INIT_SIGMA)
    for rid in runs:
        moved = sigma_moved(finals[rid]["sigma"], init, vp.embed_dim // vp.n_head)
        if moved is None:
            return verdicts.not_judged(f"{gates.CONVERGED}: {rid}: sigma starts from the data (median rule), "
                                    f"no initial value to compare")
        step_lrs = gates.run_rates(stages.run_dir(params, rid))
        if step_lrs is None:
            return verdicts.not_judged(f"{gates.CONVERGED}: {gates.no_rates(rid)} (Adam's travel unknown)")
        g = gates.params_converged(moved, gates.adam_travel(step_lrs), th.max_param_travel, "log sigma")
        if g.passed:
            g = gates.run_settled(stages.run_dir(params, rid), th, "log sigma", step_lrs, names=("log_sigma",))
        if not g.passed:
            return gates.withheld([gates.gate(g.name, False, f"{rid}: {g.why}")])
    return None


def sigma_claim(claim: dict, section: dict, params, papers: dict, scale: str) -> ClaimResult:
    finals, vp = section["finals"], params.vision
    row = paper_row(vp.rows, "003", MODEL, table=5)
    if row is None:
        return ClaimResult(claim, verdicts.NOT_RUN, scale=scale, ours="—",
                           detail=f"no row of vision.rows names {MODEL} of Table 5 in its paper field")
    # finals: the runs of vision.rows that finished (the section reads only those)
    runs = [rid for rid, f in finals.items() if rid.rsplit("-s", 1)[0] == row.name and f.get("sigma")]
    if not runs:
        return ClaimResult(claim, verdicts.NOT_RUN, scale=scale, ours="—", detail=f"no final.json of {row.name} with sigma")
    threshold = float(claim["min_ratio"])
    ratios = [head_ratio(finals[r]["sigma"]) for r in runs]
    gate = _converged(params, row, runs, finals, gates.thresholds(papers))
    comp = comparisons.judge_family([comparisons.Test("min_ratio", [threshold] * len(ratios), "ratio", ratios, paired=True,
                                          gate=gate)])[0]
    res = ClaimResult(claim, comp.verdict, [comp], scale=scale)
    per_seed = ", ".join(f"{r}: {x:.3f}" for r, x in zip(runs, ratios))
    mean = stats.mean_ci(ratios)
    res.estimate = mean.mean
    res.ours = f"median-layer max/min sigma across heads {mean.mean:.3f}"
    if comp.ci is not None and comp.ci.estimable:
        res.lo, res.hi = mean.mean - comp.ci.half, mean.mean + comp.ci.half  # the paired t's own half-width
        res.ours += f" [{res.lo:.3f}, {res.hi:.3f}]"
        res.interval = f"95% t over {verdicts.seeds_text(len(ratios))}"
    res.ours += f" (threshold {threshold:g})"
    res.detail = f"per seed: {per_seed}; row {row.name}"
    return res


