"""The LM track's claims: gka-paper's section 5 claims of paper_numbers.yaml (the kinds of
CLAIM_KINDS) judged on the numbers of the LM part's section (report.py), on the pair the paper
compared: the rows whose `paper` field names Table 8's baseline and GKA-LM (claim_rows),
trained at unequal budgets as the paper's were. The pair's comparisons pass gate (a) (the gap
of their training losses has stopped moving) and the identity rule (a GKA row that stayed at
identity is not comparable)."""

from __future__ import annotations

import re

from ...report import bootstrap, gka_state, verdicts
from ...report.verdicts import comparisons, gates, gka_identity, stability
from ...report.claims import ClaimResult, paper_row
from ...report.part import ClaimKind, ReportContext
from .core_eval import RANDOM_BASELINE
from .report_bootstrap import BOOT_RESAMPLES, BOOT_SEED, core_bootstrap, item_scores
from .stages import run_dir, runs

CLAIM_KINDS = {"lm_bpb": ClaimKind("lm"), "lm_core": ClaimKind("lm"), "lm_count": ClaimKind("lm"),
               "lm_gap": ClaimKind("lm"), "lm_train_flops": ClaimKind("lm"), "lm_core_tasks": ClaimKind("lm", ("directions",)),
               "lm_stable": ClaimKind("lm")}
PAIR = ("nanochat baseline", "GKA-LM")  # the models of Table 8 the claims compare (rows' `paper` field)


def claim_rows(rows) -> tuple[str, str] | None:
    """(baseline, GKA-LM) row names for gka-paper's claims: the rows whose `paper` field names
    PAIR's models of Table 8. The paper compares them at unequal budgets, each set by
    nanochat's parameter-to-data rule on its own model (GKA 2.7787e9 tokens, the baseline
    4.5686e9: Table 8, and the paper says so); matched tokens or FLOPs are our additions."""
    found = [paper_row(rows, "003", model, table=8) for model in PAIR]
    return None if None in found else (found[0].name, found[1].name)


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    """gka-paper's LM claims (kinds lm_bpb, lm_core, lm_count) judged on the section's numbers."""
    rows = {r["key"]: r for r in section.get("rows", [])}
    pair = section.get("claim_rows")
    scale = ctx.scale
    reading = _identity_reading(ctx, section, pair)  # the identity rule's (issue 37): read once
    beside = _gka_state(ctx.params, pair[1], reading) if pair is not None and pair[1] in rows else ""
    converged = _converged(ctx, pair) if pair is not None and pair[0] in rows and pair[1] in rows else None
    out = []
    for claim in ctx.claims_of(CLAIM_KINDS):
        kind = claim["kind"]
        if kind == "lm_stable":
            out.append(_stable_claim(claim, ctx, section.get("groups", {})))
            continue
        if kind == "lm_count":
            out.append(_count_claim(claim, section["d20"]))
        elif kind == "lm_train_flops":
            out.append(_train_flops_claim(claim, section["d20"], section["paper"]["table8"]))
        elif pair is None or pair[0] not in rows or pair[1] not in rows:
            out.append(ClaimResult(claim, verdicts.NOT_RUN, scale=scale, ours="—",
                                   detail=_missing_pair(pair, rows, ctx.params.lm.rows)))
        elif kind == "lm_bpb":
            out.append(_bpb_claim(claim, section["groups"], pair, scale))
        elif kind == "lm_gap":
            out.append(_gap_claim(claim, section["groups"], pair, scale))
        elif kind == "lm_core_tasks":
            out.append(_core_tasks_claim(claim, section["groups"], pair, scale))
        else:
            out.append(_core_claim(claim, rows[pair[1]], pair, section["groups"], scale))
        if kind not in ("lm_count", "lm_train_flops") and beside:
            out[-1].detail = "; ".join(x for x in (out[-1].detail, beside) if x)
        if converged is not None and kind not in ("lm_count", "lm_train_flops") and out[-1].verdict != verdicts.NOT_RUN:
            out[-1].verdict = gates.apply(out[-1].verdict, [converged])
            out[-1].detail = gates.beside(out[-1].detail, converged)
    return _with_identity(ctx, out, reading)


def _converged(ctx: ReportContext, pair: tuple[str, str]) -> gates.Gate:
    """Gate (a) for the pair's claims: the gap between the two rows' training losses (standing in
    for the BPB and CORE they judge, evaluated once at the end) has stopped moving over the last
    part of training (report.verdicts.gates.runs_gap_stable, at the same fraction of each row's
    schedule; thresholds of paper_numbers.yaml)."""
    files = {row: {r.run_id: run_dir(ctx.params, r.run_id) / "metrics.jsonl" for r in runs(ctx.params) if r.row == row}
             for row in pair}
    return gates.runs_gap_stable(pair[0], files[pair[0]], pair[1], files[pair[1]], gates.thresholds(ctx.papers))


def _stable_claim(claim: dict, ctx: ReportContext, groups: dict) -> ClaimResult:
    """"GKA-LM trains stably" over every finished run (one with an evaluation: `groups`) of
    every GKA row of lm.rows (report.verdicts.stability)."""
    gka = {r.name for r in ctx.params.lm.rows if r.variant == "gka"}
    done = {x["run_id"] for row in gka for x in groups.get(row, [])}
    records = [(spec.run_id, stability.read_record(run_dir(ctx.params, spec.run_id) / "metrics.jsonl"))
               for spec in runs(ctx.params) if spec.run_id in done]
    return stability.judge(claim, records, stability.rule(ctx.papers), ctx.scale)


def _gka_state(params, name: str, reading: gka_state.DiagonalReading | None = None) -> str:
    """Beside the GKA row of the pair when it starts at sigma = 1: sigma at the end, read from
    its runs' checkpoints, and the identity rule's mean diagonal weight (mean over the runs read)."""
    row = next(r for r in params.lm.rows if r.name == name)
    if not gka_state.starts_at_one(row.variant, row.options):
        return ""
    specs = [r for r in runs(params) if r.row == name]
    read = [gka_state.checkpoint_sigma(run_dir(params, r.run_id) / "ckpt.pt") for r in specs]
    sigma = [x for got in read if got for x in got]
    diag = [v for v in (reading.values.values() if reading else ()) if v is not None]
    return f"{name}: " + gka_state.sigma_text(sigma or None, sum(diag) / len(diag) if diag else None,
                                              f"ckpt.pt of {sum(1 for g in read if g)} of {len(specs)} runs")


# The claims that compare the pair's GKA row with the baseline: under the identity rule of
# paper_numbers.yaml `gka_identity` (report.gka_state). Counts, FLOPs and stability compare nothing.
IDENTITY_KINDS = ("lm_bpb", "lm_core", "lm_gap", "lm_core_tasks")


def _identity_reading(ctx: ReportContext, section: dict, pair) -> gka_state.DiagonalReading | None:
    """The mean diagonal weight at the end of every evaluated run of the pair's GKA row (its
    checkpoint on the first validation windows: report.gka_state.run_diagonal); None when the
    pair is not both evaluated or its second row is no GKA row."""
    groups = section.get("groups", {})
    if pair is None or pair[0] not in groups or pair[1] not in groups:
        return None
    if next(r for r in ctx.params.lm.rows if r.name == pair[1]).variant != "gka":
        return None
    from .track import LMTrack

    done = {x["run_id"] for x in groups[pair[1]]}
    specs = {r.run_id: r for r in runs(ctx.params) if r.run_id in done}
    return gka_state.read_row(pair[1], {rid: run_dir(ctx.params, rid) for rid in specs},
                              lambda rid: LMTrack(ctx.params, specs[rid]))


def _with_identity(ctx: ReportContext, out: list[ClaimResult], reading) -> list[ClaimResult]:
    """The identity rule on every claim of IDENTITY_KINDS, after the gates (a row that stayed at
    identity is not comparable whatever the gap gate says)."""
    if reading is not None:
        threshold = gka_identity.max_diagonal(ctx.papers)
        for res in out:
            if res.claim["kind"] in IDENTITY_KINDS:
                gka_identity.apply_identity(res, reading, threshold)
    return out


def _missing_pair(pair, rows: dict, lm_rows=()) -> str:
    """Why the pair's claims are not run: which of Table 8's models no row of this scale's lm.rows
    trains (naming the row field that would), or which row of the pair has no evaluation."""
    if pair is None:
        lacking = [m for m in PAIR if paper_row(lm_rows, "003", m, table=8) is None]
        return (f"no row of this scale's lm.rows trains {' or '.join(lacking)} of Table 8 (a row with "
                f"paper: {{document: gka-paper, table: 8, model: {lacking[0]}}}; the rows here: "
                f"{', '.join(r.name for r in lm_rows) or 'none'})")
    return f"no evaluation of {' and '.join(x for x in pair if x not in rows)} (the paper's pair, Table 8)"


def _count_claim(claim: dict, d20: dict) -> ClaimResult:
    ratio = d20["gka"]["total"] / d20["base"]["total"]
    ok = round(ratio, 2) == float(claim["paper_value"])
    return ClaimResult(claim, verdicts.BY_CONSTRUCTION if ok else verdicts.CONTRADICTED, scale=verdicts.PAPER_SCALE,
                       ours=f"{ratio:.4f} ({d20['gka']['total']:,} / {d20['base']['total']:,}, depth 20 on the meta device)",
                       estimate=ratio, detail="a parameter count of the depth-20 models, not a training result")


def _train_flops_claim(claim: dict, d20: dict, table8: dict) -> ClaimResult:
    """Table 8's 0.49x: our depth-20 FLOPs/token x the training tokens Table 8 gives each model
    (the budgets the paper's pair trained on: the gka_paper row's). Beside it, the ratio that
    nanochat's rule applied to our own depth-20 models would give."""
    ours = {k: d20[k]["flops_per_token"] * float(table8[k]["train_tokens"]) for k in ("base", "gka")}
    ratio = ours["gka"] / ours["base"]
    rule = {k: d20[k]["flops_per_token"] * d20[k]["rule_tokens"] for k in ("base", "gka")}
    ok = round(ratio, 2) == float(claim["paper_value"])
    return ClaimResult(claim, verdicts.BY_CONSTRUCTION if ok else verdicts.CONTRADICTED, scale=verdicts.PAPER_SCALE,
                       estimate=ratio, ours=f"{ratio:.4f} (our FLOPs/token x Table 8's tokens)",
                       detail=(f"nanochat's rule on our depth-20 models gives {d20['gka']['rule_tokens']:.4g} "
                               f"(GKA) and {d20['base']['rule_tokens']:.4g} (base) tokens, "
                               f"{rule['gka'] / rule['base']:.2f}x; Table 8: {float(table8['gka']['train_tokens']):.4g} "
                               f"and {float(table8['base']['train_tokens']):.4g}: the paper's GKA count of scaling "
                               f"parameters differs from ours where the two differ"))


def _core_tasks_claim(claim: dict, groups: dict, pair: tuple[str, str], scale: str) -> ClaimResult:
    """Table 7's per-task directions (`directions`: task -> higher | lower | equal, GKA against
    the baseline): per task the paired bootstrap interval over items of GKA - base centered
    score, at 1 - 0.05/k for the k tasks (Bonferroni: one family). A directional task agrees
    when its interval lies on the paper's side of 0, disagrees when on the other; "equal"
    agrees when it contains 0. Reproduced if every task agrees, contradicted if any directional
    task disagrees, otherwise inconclusive."""
    directions = claim["directions"]
    base, gka = groups[pair[0]], groups[pair[1]]
    seeds = sorted({x["seed"] for x in base} & {x["seed"] for x in gka})
    level = 1 - verdicts.ALPHA / len(directions)
    calls, texts = [], []
    for i, (task, want) in enumerate(directions.items()):
        a, b = item_scores(gka, task, seeds), item_scores(base, task, seeds)
        if a is None or b is None or len(a) != len(b):
            return ClaimResult(claim, verdicts.INCONCLUSIVE, scale=scale, ours="no per-item results",
                               detail="rerun eval-lm: its output lacks per-item correctness")
        boot = bootstrap.paired_bootstrap([(a, b)], bootstrap.centered_diff_statistic([RANDOM_BASELINE[task]]),
                                      BOOT_RESAMPLES, level=level, seed=BOOT_SEED + i)
        side = "higher" if boot.lo > 0 else "lower" if boot.hi < 0 else "equal"
        calls.append("agrees" if side == want else "disagrees" if "equal" not in (side, want) else "undecided")
        texts.append(f"{task} {boot.estimate:+.3f} [{boot.lo:+.3f}, {boot.hi:+.3f}], MDE {boot.mde():.3f} "
                     f"({want}: {calls[-1]})")
    verdict = (verdicts.REPRODUCED if all(c == "agrees" for c in calls) else
               verdicts.CONTRADICTED if "disagrees" in calls else verdicts.INCONCLUSIVE)
    return ClaimResult(claim, verdict, scale=scale, ours="; ".join(texts),
                       interval=f"{level:.0%} paired bootstrap over items per task (Bonferroni over {len(directions)} "
                                f"tasks), seeds {', '.join(map(str, seeds))}")


def _gap_claim(claim: dict, groups: dict, pair: tuple[str, str], scale: str) -> ClaimResult:
    """Table 6: GKA's val - train BPB gap below the baseline's, paired by seed (comparisons.compare_less)."""
    gap = {k: {x["seed"]: x["val_bpb"] - x["train_bpb"] for x in groups[k]} for k in pair}
    seeds = sorted(set(gap[pair[0]]) & set(gap[pair[1]]))
    comp = comparisons.compare_less(pair[1], [gap[pair[1]][s] for s in seeds], pair[0], [gap[pair[0]][s] for s in seeds],
                              paired=True)
    res = ClaimResult(claim, comp.verdict, [comp], scale=scale)
    if comp.ci is not None and comp.ci.estimable:
        res.estimate, res.lo, res.hi = comp.ci.diff, comp.ci.lo, comp.ci.hi
        res.interval = f"95% paired t over seeds {', '.join(map(str, seeds))}"
    mean = {k: sum(gap[k][s] for s in seeds) / len(seeds) for k in pair}
    res.ours = (f"gap GKA {mean[pair[1]]:+.4f}, base {mean[pair[0]]:+.4f}; GKA − base "
                + (f"{comp.ci.diff:+.4f} [{comp.ci.lo:+.4f}, {comp.ci.hi:+.4f}], MDE {comp.mde:.4f}" if res.interval
                   else f"{mean[pair[1]] - mean[pair[0]]:+.4f} (no interval)"))
    return res


def _bpb_claim(claim: dict, groups: dict, pair: tuple[str, str], scale: str) -> ClaimResult:
    base = {x["seed"]: x["val_bpb"] for x in groups[pair[0]]}
    gka = {x["seed"]: x["val_bpb"] for x in groups[pair[1]]}
    seeds = sorted(set(base) & set(gka))
    comp = comparisons.compare_less(pair[0], [base[s] for s in seeds], pair[1], [gka[s] for s in seeds], paired=True)
    estimable = comp.ci is not None and comp.ci.estimable
    res = ClaimResult(claim, comp.verdict, [comp], scale=scale,
                      interval=f"95% paired t over seeds {', '.join(map(str, seeds))}" if estimable else "")
    if not estimable:
        res.ours = (f"GKA − base val BPB: {sum(gka[s] - base[s] for s in seeds) / len(seeds):+.4f} "
                    f"({verdicts.seeds_text(len(seeds))}, no interval)")
    else:  # stated as GKA - base, the paper's direction
        res.estimate, res.lo, res.hi = -comp.ci.diff, -comp.ci.hi, -comp.ci.lo
        res.ours = f"GKA − base val BPB: {res.estimate:+.4f} [{res.lo:+.4f}, {res.hi:+.4f}], MDE {comp.mde:.4f}"
    # the judged value is the final one (paper_numbers.yaml judged_loss): eval-lm scores the final
    # weights only, so there is no best BPB to show beside it
    res.detail = "BPB of the final weights (eval-lm scores no other)"
    return res


def _core_claim(claim: dict, row: dict, pair: tuple[str, str], groups: dict, scale: str) -> ClaimResult:
    boot = row.get("boot")
    if boot and boot["against"] != pair[0]:  # the table's reference is another row: pair them here
        boot = core_bootstrap({k: groups[k] for k in pair}, pair[0]).get(pair[1])
    if not boot:
        return ClaimResult(claim, verdicts.INCONCLUSIVE, scale=scale, ours="no per-item results",
                           detail="rerun eval-lm: its output lacks per-item correctness")
    b = boot["mean"]
    verdict = verdicts.REPRODUCED if b.hi < 0 else verdicts.CONTRADICTED if b.lo > 0 else verdicts.INCONCLUSIVE
    return ClaimResult(claim, verdict, scale=scale, estimate=b.estimate, lo=b.lo, hi=b.hi,
                       ours=f"GKA − base mean centered: {b.estimate:+.4f} [{b.lo:+.4f}, {b.hi:+.4f}], MDE {b.mde():.4f}",
                       interval=f"95% paired bootstrap over {b.n_items} items ({b.resamples} resamples), "
                                f"seeds {', '.join(map(str, boot['seeds']))}",
                       detail=core_resolution(b, claim.get("paper_value"), boot["seeds"]))


def core_resolution(b, paper_value, seeds) -> str:
    """What a CORE-6 verdict can resolve: the bootstrap's MDE at these items and seeds, against
    the paper's reported gap (the first number of its paper_value)."""
    found = re.match(r"\s*([+-]?\d*\.\d+)", str(paper_value or ""))
    head = (f"resolution: MDE {b.mde():.4f} (80% power) over {b.n_items} items at seeds "
            f"{', '.join(map(str, seeds))}")
    if found is None:
        return head
    paper = float(found.group(1))
    size = "below" if abs(paper) < b.mde() else "at or above"
    return f"{head}; the paper's gap {paper:+.4f} is {size} what these runs resolve"
