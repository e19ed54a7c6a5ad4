"""The char track's claims (gpa-short and gpa-long) judged on its runs table: orderings and
"works as well as" between rows, extra parameters by construction (count) and the papers' model
sizes (number). Each comparison reads the validation loss paper_numbers.yaml pre-registers
(`judged_loss`: final or best) and shows the other beside it.

Two ways to judge a comparison, one per scale:
- with a budget sweep (train.schedule wsd, train.budgets): the gap read across the budgets as
  a + b/L (report.verdicts.budget_trend, via report_budgets.judge_family): every interval at 1 - 0.05/k,
  Bonferroni over the k comparisons of its figure;
- without one: pairwise t tests over seeds, one Holm family per figure (comparisons.judge_family),
  each comparison gated on its gap being stable at this budget (report/verdicts/gates.py gap_stable,
  the room it may close counted as at least budget_trend's delta) and on the seeds
  (verdicts.MIN_SEEDS, a non-zero spread).
A "works as well as RoPE" margin is a number or a fraction of the NoPE - RoPE gap at this scale,
of the lower end of its interval with `end: lower` (comparisons.noninferiority_margin). Where the scale
trains the variant-owned parameters at another factor, the papers' recipe (their twins at x1) is
the verdict and the other factor is printed after it (report_budgets.recipe_arm, arm_text)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ...report import verdicts
from ...report.verdicts import budget_trend, comparisons, gates
from ...report.claims import ClaimResult, fmt_comp_diff, margin_rule, shown_interval
from . import report_budgets, stages

JUDGED = ("final", "best")  # paper_numbers.yaml `judged_loss`: which validation loss a verdict reads


def _seed_values(runs_df: pd.DataFrame, column: str) -> dict[str, dict[int, float]]:
    return {row: dict(zip(g["seed"].astype(int), g[column].astype(float)))
            for row, g in runs_df.groupby("row", sort=False)}


def _pair(values: dict[str, dict[int, float]], a: str, b: str) -> tuple[list[float], list[float], bool]:
    """The two rows' values; in seed order and paired when both have the same seeds."""
    sa, sb = values[a], values[b]
    if set(sa) == set(sb):
        seeds = sorted(sa)
        return [sa[s] for s in seeds], [sb[s] for s in seeds], True
    return list(sa.values()), list(sb.values()), False


def _interval_text(comps: list[comparisons.Comparison], judged: str) -> str:
    """How the printed intervals were made. In a Holm family of several tests each tested
    comparison shows the interval at its Holm step's level (claims.fmt_comp_diff), not the
    95% one, so that what is printed and the verdict agree (stats module docstring)."""
    cis = [c.ci for c in comps if c.ci is not None]
    if not cis:
        return ""
    kind = "paired t over seeds (same batch order per seed)" if cis[0].paired else "Welch t over seeds"
    k = max(c.family_size for c in comps)
    if any(c.trend is not None for c in comps):
        return (f"{kind} of the {judged} validation loss at the largest budget, each interval (and the fit's) at "
                f"1 − 0.05/{k} (Bonferroni over the {k} comparisons of its figure); the gap read across the budget "
                f"sweep as {budget_trend.FORM}")
    if k <= 1:
        return f"95% {kind} of the {judged} validation loss"
    untested = any(c.holm_level is None and c.ci is not None and c.ci.estimable for c in comps)
    return (f"{kind} of the {judged} validation loss, Holm across the {k} tests of its figure: intervals at each "
            f"test's Holm step level (two-sided 1 − 0.05/(k − j + 1) for the j-th smallest p; a test after the "
            f"step Holm stopped at, at that step's level), so each interval agrees with its verdict"
            + ("; a comparison not tested (a gate): its 95% interval" if untested else ""))


@dataclass
class Setting:
    """What every comparison claim of the char track reads: the judged and the other loss per
    row and seed, every run's validation curve per row (the gap gate, without a sweep), the
    budget sweep (with one), the rows' names for missing-row notes."""

    judged: str
    values: dict          # row -> seed -> judged loss
    other: dict           # row -> seed -> the other loss (shown beside)
    curves: dict | None   # row -> {run id: gates.RunCurve} of each seed; None: no gap gate
    thresholds: gates.Thresholds | None
    missing_note: object
    scale: str
    other_name: str = ""
    budget_values: dict | None = None   # report_budgets.budget_values: the budget sweep (None: none)
    budgets: tuple[int, ...] = ()
    sums: dict | None = None            # report_budgets.lr_sums: each run's L at each budget
    trend: budget_trend.Rule | None = None
    eval_error: dict | None = None      # row -> (mean standard error of its runs' last evaluation, windows)

    @property
    def swept(self) -> bool:
        return self.budget_values is not None and len(self.budgets) > 1

    def eval_note(self, a: str, b: str) -> str:
        """The evaluation's own sampling error beside the seed interval (which is conditional on
        the evaluated windows): each row's mean standard error over its runs."""
        err = self.eval_error or {}
        if a not in err or b not in err:
            return ""
        (sa, n), (sb, _) = err[a], err[b]
        return (f"evaluation's own standard error per run (whole validation split, {n:,} windows): "
                f"{a} ±{sa:.4f}, {b} ±{sb:.4f}")

    def gap_gate(self, a: str, b: str, boundary: float = 0.0) -> tuple[str | None, str]:
        """Without a sweep, "gap stable at this budget" on a - b (gates.gap_stable, its room counted
        as at least budget_trend's delta): its verdict when it fails, else None, and what it
        measured (printed beside the verdict either way). A swept comparison is read across the
        sweep instead (report_budgets.judge_family)."""
        if self.curves is None or self.swept:
            return None, ""
        th, floor = self.thresholds, self.trend.delta if self.trend is not None else 0.0
        g = gates.gap_stable(a, self.curves.get(a, {}), b, self.curves.get(b, {}), th.gap_tail_lr_fraction,
                             th.gap_max_closing, boundary=boundary, floor=floor)
        return gates.withheld([g]), g.why


def _margin(claim: dict, st: Setting) -> tuple[float | None, str]:
    """The claim's non-inferiority margin (claims.margin_rule): a number fixed in
    paper_numbers.yaml, or a fraction (fixed there) of the NoPE - RoPE gap in the judged loss
    at this scale, of its point estimate or, with `end: lower`, of the lower end of its 95%
    interval (comparisons.noninferiority_margin)."""
    rule = margin_rule(claim)
    if "number" in rule:
        return rule["number"], f"margin {rule['number']:.4f} (fixed)"
    nope, rope = rule["of"]
    if nope not in st.values or rope not in st.values:
        return None, f"no margin: {st.missing_note(nope if nope not in st.values else rope)}"
    va, vb, paired = _pair(st.values, nope, rope)
    margin, why = comparisons.noninferiority_margin(rule["fraction"], va, vb, paired, end=rule["end"])
    return margin, (f"margin {margin:.4f} = {why}" if margin is not None else f"no margin: {why}")


def _tests(claim: dict, st: Setting) -> list[comparisons.Test] | None:
    """The claim's comparisons as tests (gated by convergence and a margin), None if a row is missing."""
    kind = claim["kind"]
    pairs = comparisons.ordering_pairs(claim["order"]) if kind == "order" else [tuple(claim["rows"])]
    if any(x not in st.values for pair in pairs for x in pair):
        return None
    margin, margin_note = _margin(claim, st) if kind == "noninferior" else (None, "")
    out = []
    for a, b in pairs:
        va, vb, paired = _pair(st.values, a, b)
        # below verdicts.MIN_SEEDS the seeds withhold the test (comparisons.judge_family), and say so first
        few = min(len(va), len(vb)) < verdicts.MIN_SEEDS
        gate, measured = (None, "") if few else st.gap_gate(a, b, margin if kind == "noninferior" and margin is not None
                                                            else 0.0)
        if kind == "noninferior" and margin is None:
            gate = gate or verdicts.not_judged(margin_note.removeprefix("no margin: "))
        oa, ob, _ = _pair(st.other, a, b)
        other = f"{st.other_name}: {a} − {b} {sum(oa) / len(oa) - sum(ob) / len(ob):+.4f}"
        out.append(comparisons.Test(a, va, b, vb, paired, margin=margin if kind == "noninferior" else None, gate=gate,
                              # the gate's reading also when it withheld the verdict: what it saw
                              note="; ".join(x for x in (margin_note, other, st.eval_note(a, b), measured) if x)))
    return out


def _fmt_comp(c: comparisons.Comparison, st: Setting) -> str:
    if c.ci is None:  # one seed: the difference without an interval
        va, vb = st.values[c.a], st.values[c.b]
        return f"{c.a} − {c.b}: {sum(va.values()) / len(va) - sum(vb.values()) / len(vb):+.4f} (1 seed, no interval)"
    text = f"{c.a} − {c.b}: {fmt_comp_diff(c)}"
    limit = f", limit a {c.trend.a.text()}" if c.trend is not None and c.trend.a is not None else ""
    return text + (f", MDE {c.mde:.4f}" if c.mde is not None else "") + limit


def _result(claim: dict, comps: list[comparisons.Comparison], st: Setting) -> ClaimResult:
    res = ClaimResult(claim, budget_trend.combine([c.verdict for c in comps]), comps, scale=st.scale,
                      interval=_interval_text(comps, st.judged))
    res.ours = "; ".join(_fmt_comp(c, st) for c in comps)
    if claim["kind"] == "noninferior" and comps[0].margin is not None:
        res.ours += f"; margin {comps[0].margin:.4f}"
    res.detail = " | ".join(dict.fromkeys(c.note for c in comps if c.note))
    if len(comps) == 1 and (shown := shown_interval(comps[0])) is not None:  # the interval its verdict reads
        res.estimate, (res.lo, res.hi) = comps[0].ci.diff, shown
    return res


def _judge_comparisons(claims: list[dict], st: Setting) -> dict[str, ClaimResult]:
    """Every order / noninferior claim, by family (`family`, default the claim's id): the
    family's distinct comparisons judged together (across the sweep, Bonferroni; else Holm),
    then handed back to their claims."""
    out, families = {}, {}
    for claim in claims:
        tests = _tests(claim, st)
        if tests is None:
            kind = claim["kind"]
            pairs = comparisons.ordering_pairs(claim["order"]) if kind == "order" else [tuple(claim["rows"])]
            comps = [comparisons.Comparison(a, "<" if kind == "order" else "≲", b, verdicts.NOT_RUN,
                                      note="; ".join(st.missing_note(x) for x in (a, b) if x not in st.values))
                     for a, b in pairs]
            out[claim["id"]] = ClaimResult(claim, verdicts.NOT_RUN, comps, scale=st.scale, ours="—")
            continue
        families.setdefault(claim.get("family", claim["id"]), []).append((claim, tests))
    for members in families.values():
        distinct = list(dict.fromkeys((t.a, t.b, t.margin) for _, tests in members for t in tests))
        first = {(t.a, t.b, t.margin): t for _, tests in members for t in tests}
        family = [first[k] for k in distinct]
        judged = dict(zip(distinct, report_budgets.judge_family(family, st.budget_values, st.sums, list(st.budgets),
                                                                st.trend) if st.swept else comparisons.judge_family(family)))
        for claim, tests in members:
            out[claim["id"]] = _result(claim, [judged[(t.a, t.b, t.margin)] for t in tests], st)
    return out


def convergence(runs_df: pd.DataFrame, curves: dict, papers: dict, params=None) -> dict[str, str | None]:
    """row -> the convergence gate's verdict for its worst seed (None: every seed converged). With
    `params` of a warmup-stable-decay schedule, the loss is read up to its cooldown (the stable
    phase's tail: gates.loss_converged's `until`)."""
    from ...config.char import cooldown_start

    th = gates.thresholds(papers)
    tp = params.train if params is not None else None
    until = cooldown_start(tp.max_steps, tp.cooldown_fraction) if tp is not None and tp.schedule == "wsd" else None
    out = {}
    for row, g in runs_df.groupby("row", sort=False):
        results = [(rid, gates.loss_converged(*curves.get(rid, ([], [])), th.last_fraction, th.max_loss_drop,
                                              until=until))
                   for rid in g["run_id"]]
        failed = [(rid, x) for rid, x in results if not x.passed]
        out[row] = (gates.withheld([gates.gate(failed[0][1].name, False, f"{failed[0][0]}: {failed[0][1].why}")])
                    if failed else None)
    return out


def _fmt_count(v) -> str:
    return "—" if v is None else f"{v:,}" if isinstance(v, int) else str(v)


def _count_claim(claim: dict, ours, rows: dict, params, scale: str) -> ClaimResult:
    formula = claim["formula"]
    m = int(rows[claim["row"]].options.get("n_kernels", formula.get("n_kernels")))
    per = int(formula["per_kernel"])
    layers, heads = params.model.n_layer, params.model.n_head
    expected = per * m * layers * heads
    verdict = verdicts.BY_CONSTRUCTION if ours == expected else verdicts.CONTRADICTED
    detail = (f"expected {per}·M·layers·heads = {per}·{m}·{layers}·{heads} = {expected:,} at scale {scale!r}; "
              f"ours: {_fmt_count(ours)}; paper: {_fmt_count(claim.get('paper_value'))}"
              + ("" if verdict == verdicts.BY_CONSTRUCTION else "; our construction differs from the formula"))
    return ClaimResult(claim, verdict, detail=detail, scale=scale, ours=_fmt_count(ours),
                       estimate=float(ours) if isinstance(ours, (int, float)) else None)


def _number_claim(claim: dict, ours, scale: str) -> ClaimResult:
    paper_value = float(claim["paper_value"])
    tol = float(claim.get("rel_tol", 0.0))
    ok_number = isinstance(ours, (int, float)) and math.isfinite(ours)
    if claim.get("architecture"):
        verdict = verdicts.not_comparable(f"architecture differs: {' '.join(str(claim['architecture']).split())}")
    elif scale != verdicts.PAPER_SCALE:
        verdict = verdicts.not_comparable(f"a paper-scale number; this is scale {scale}")
    elif not ok_number:
        verdict = verdicts.INCONCLUSIVE
    else:
        ok = abs(float(ours) - paper_value) <= tol * abs(paper_value)
        verdict = verdicts.REPRODUCED if ok else verdicts.CONTRADICTED
    rel = f" ({(float(ours) - paper_value) / paper_value:+.1%})" if ok_number else ""
    detail = (f"paper: {_fmt_count(claim['paper_value'])}; ours: {_fmt_count(ours)}{rel}; "
              f"tolerance ±{tol:.0%} at paper scale")
    return ClaimResult(claim, verdict, detail=detail, scale=scale, ours=f"{_fmt_count(ours)}{rel}",
                       estimate=float(ours) if ok_number else None)


def _eval_error(runs_df: pd.DataFrame) -> dict | None:
    """row -> (mean val_loss_se over its runs, windows) where every run scored the whole split."""
    if "val_loss_se" not in runs_df:
        return None
    out = {}
    for row, g in runs_df.groupby("row", sort=False):
        se = pd.to_numeric(g["val_loss_se"], errors="coerce")
        if se.notna().all():
            out[row] = (float(se.mean()), int(g["val_windows"].iloc[0]))
    return out


def _renamed(claim: dict, arm: dict[str, str | None]) -> dict | None:
    """The claim on the rows' twins at variant lr x 1 (None: a row has no twin)."""
    def one(x):
        return [one(y) for y in x] if isinstance(x, (list, tuple)) else arm.get(x, x)
    names = claim.get("order") or claim.get("rows")
    flat = comparisons.ordering_pairs(names) if claim["kind"] == "order" else [tuple(names)]
    if any(arm.get(x, x) is None for pair in flat for x in pair):
        return None
    key = "order" if claim["kind"] == "order" else "rows"
    return {**claim, key: one(names)}


def _recipe_arms(claims: list[dict], st: Setting, arms: report_budgets.RecipeArms) -> dict[str, ClaimResult]:
    """Every comparison claim judged on the papers' recipe, its rows' twins at variant lr x 1
    (the verdict), and on their twins at the other factor, printed after it
    (report_budgets.arm_text)."""
    ours = {c["id"]: _renamed(c, arms.primary) for c in claims}
    theirs = {c["id"]: _renamed(c, arms.other) for c in claims}
    primary = _judge_comparisons([c for c in ours.values() if c is not None], st)
    secondary = _judge_comparisons([c for c in theirs.values() if c is not None], st)
    for claim in claims:
        sec, res = secondary.get(claim["id"]), primary.get(claim["id"])
        if res is None:
            pairs = comparisons.ordering_pairs(claim["order"]) if claim["kind"] == "order" else [tuple(claim["rows"])]
            missing = sorted({x for pair in pairs for x in pair if arms.primary.get(x, x) is None})
            why = f"no row at the papers' one lr (×1) for {', '.join(missing)}"
            res = primary[claim["id"]] = ClaimResult(claim, verdicts.NOT_RUN, scale=st.scale, ours="—", detail=why)
        res.claim = claim   # the claim as written (the page finds its result by it), not its twins' copy
        if sec is None or ours[claim["id"]] == theirs[claim["id"]]:   # no twin, or nothing the factor speeds up
            continue
        res.arm = report_budgets.arm_text(sec.shown, arms.factor,
                                          report_budgets.depends_on_recipe(res.comparisons, sec.comparisons))
        res.detail = " | ".join(x for x in (res.detail, f"×{arms.factor:g} arm: {sec.ours}") if x)
    return primary


def judge(claims: list[dict], params, runs_df: pd.DataFrame, papers: dict,
          curves: dict | None = None) -> list[ClaimResult]:
    """Claims of kinds order, noninferior, count and number on the runs table, in their order.
    With a budget sweep each comparison is read across it (module docstring); without one,
    `curves` (run id -> (steps, val losses)) feed the gate "gap stable at this budget" on each
    compared pair's gap, read against each run's learning-rate sum (lr.npy) (None: no gate)."""
    rows = {r.name: r for r in params.matrix.rows}
    scale = params.scale
    judged = papers.get("judged_loss", "final")
    if judged not in JUDGED:
        raise ValueError(f"paper_numbers.yaml: judged_loss must be one of {', '.join(JUDGED)}, got {judged!r}")
    column = {"final": "val_loss", "best": "best_val_loss"}

    def missing_note(name: str) -> str:
        if name in rows:
            return f"{name} is not in the matrix of scale {scale!r} (matrix.only)"
        return f"{name} is not a row of {params.path}"

    other = next(x for x in JUDGED if x != judged)

    def curve(rid: str) -> gates.RunCurve:
        """A run's curve on the learning rates its engine set (lr.npy; none: the gate says so)."""
        steps, losses = curves.get(rid, ([], []))
        rates = gates.run_rates(stages.run_dir(params, rid))
        return gates.RunCurve(steps, losses, gates.cumulative([] if rates is None else rates))
    row_curves = None if curves is None else {
        row: {rid: curve(rid) for rid in g["run_id"]} for row, g in runs_df.groupby("row", sort=False)}
    swept = bool(params.train.budgets)
    st = Setting(judged, _seed_values(runs_df, column[judged]), _seed_values(runs_df, column[other]), row_curves,
                 gates.thresholds(papers) if curves is not None else None, missing_note, scale, f"{other} loss",
                 report_budgets.budget_values(params, runs_df) if swept else None,
                 tuple(report_budgets.budgets_of(params)), report_budgets.lr_sums(params, runs_df) if swept else None,
                 budget_trend.rule(papers), _eval_error(runs_df))
    comparing = [c for c in claims if c["kind"] in ("order", "noninferior")]
    arm = report_budgets.recipe_arm(params.matrix.rows, params.train.variant_lr_scale, runs_df)
    compared = _judge_comparisons(comparing, st) if arm is None else _recipe_arms(comparing, st, arm)
    results = []
    for claim in claims:
        kind = claim["kind"]
        if kind in ("order", "noninferior"):
            results.append(compared[claim["id"]])
            continue
        row = claim["row"]  # count, number: a field of the row's final.json, the same for every seed
        if row not in st.values:
            results.append(ClaimResult(claim, verdicts.NOT_RUN, detail=missing_note(row), scale=scale, ours="—"))
            continue
        got = list(dict.fromkeys(runs_df.loc[runs_df["row"] == row, claim["field"]].tolist()))
        ours = got[0] if len(got) == 1 else None
        results.append(_count_claim(claim, ours, rows, params, scale) if kind == "count"
                       else _number_claim(claim, ours, scale))
    return results
