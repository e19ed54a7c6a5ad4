"""Two readings of a char comparison beyond its one budget and one recipe (issues 37, 48).

The budget sweep: with train.schedule wsd and train.budgets, every run also has its result at
each shorter budget (its cooldown branched off it: kernattn cooldown), and each budget's
learning-rate sum L (the lr.npy of the run or of its branch). `sweep` gives a compared gap a - b
per seed and budget with the budgets' L: what report.verdicts.budget_trend reads (g = a + b/L).

The recipe arm: a scale may train the variant-owned parameters (banks, tables, learned RoPE
frequencies, GKA's sigma) at train.variant_lr_scale x lr, the papers at 1 x. `recipe_arm` maps
each row with such parameters to its twin at 1 x and to its twin at the other factor (a row of
the same variant and options whose variant_lr_scale is that factor), whichever factor the scale
names its rows at. The papers' recipe is the primary arm: a claim reads the 1 x twins, and
prints the other factor's verdict after it (`arm_text`), with "the verdict
depends on the recipe" when the two arms' intervals exclude 0 on opposite sides
(`depends_on_recipe`), judged or not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...report import stats, verdicts
from ...report.verdicts import budget_trend, comparisons, gates
from .stages import budget_dir, budget_run_id, run_dir

Values = dict[str, dict[int, dict[int, float]]]   # row -> budget -> seed -> final validation loss


def budget_values(p, runs_df: pd.DataFrame) -> Values:
    """Every finished run's final validation loss at its full budget (the runs table) and at each
    of train.budgets (its branch's final.json, where it exists)."""
    out: Values = {}
    for run_id, row, seed, loss in zip(runs_df["run_id"], runs_df["row"], runs_df["seed"], runs_df["val_loss"]):
        by_budget = out.setdefault(row, {})
        by_budget.setdefault(p.train.max_steps, {})[int(seed)] = float(loss)
        for budget in p.train.budgets:
            final = budget_dir(p, run_id, budget) / "final.json"
            if final.is_file():
                by_budget.setdefault(budget, {})[int(seed)] = float(json.loads(final.read_text())["val_loss"])
    return out


Sums = dict[str, dict[int, dict[int, float | None]]]   # row -> budget -> seed -> learning-rate sum


def lr_sums(p, runs_df: pd.DataFrame) -> Sums:
    """Every finished run's learning-rate sum at its full budget and at each of train.budgets
    (the sum of the rates its engine set, lr.npy; None for a run or branch without one)."""
    out: Sums = {}
    for run_id, row, seed in zip(runs_df["run_id"], runs_df["row"], runs_df["seed"]):
        by_budget = out.setdefault(row, {})
        for budget, folder in ((p.train.max_steps, run_dir(p, run_id)),
                               *((b, budget_dir(p, run_id, b)) for b in p.train.budgets)):
            rates = gates.run_rates(folder)
            by_budget.setdefault(budget, {})[int(seed)] = None if rates is None else gates.adam_travel(rates)
    return out


def sweep(a: str, b: str, values: Values, sums: Sums, budgets: list[int]):
    """(gaps [seeds, budgets] of a - b, L [budgets], the seeds) over the seeds with both rows
    at every budget, or one clause saying what is missing (a run at a budget, its lr.npy, or
    runs of one budget that disagree on L: the gap would be read against two schedules)."""
    seeds = set.intersection(*(set(values.get(a, {}).get(n, {})) & set(values.get(b, {}).get(n, {}))
                               for n in budgets))
    if not seeds:
        return f"no seed has finished runs of {a} and {b} at every budget ({', '.join(map(str, budgets))}; " \
               f"kernattn cooldown)"
    seeds, lrs = sorted(seeds), []
    for n in budgets:
        got = {f"{row}-s{s}": sums.get(row, {}).get(n, {}).get(s) for row in (a, b) for s in seeds}
        lacking = next((rid for rid, x in got.items() if x is None), None)
        if lacking is not None:   # the full run is the largest budget; the others are its branches
            return gates.no_rates(lacking if n == max(budgets) else budget_run_id(lacking, n))
        lo, hi = min(got.values()), max(got.values())
        if hi - lo > 1e-9 * hi:
            return f"the runs at budget {n} differ in learning-rate sum ({lo:.6g}–{hi:.6g})"
        lrs.append(hi)
    gaps = np.array([[values[a][n][s] - values[b][n][s] for n in budgets] for s in seeds])
    return gaps, np.array(lrs), seeds


def judge_family(tests, values: Values, sums: Sums, budgets: list[int], r: budget_trend.Rule) -> list:
    """The comparisons (comparisons.Test) of one family read across the sweep (report.verdicts.budget_trend),
    every interval at 1 - 0.05/k, k = every comparison of the family: comparisons.Comparison each,
    its verdict the reading's, its printed interval the largest budget's at that level."""
    return [_trend_comparison(t, values, sums, budgets, r, len(tests)) for t in tests]


def _trend_comparison(t, values: Values, sums: Sums, budgets: list[int], r: budget_trend.Rule, k: int):
    got = sweep(t.a, t.b, values, sums, budgets)
    if t.gate is not None:   # a margin not established
        trend = budget_trend.Trend(verdicts.NOT_JUDGED, t.gate)
    elif isinstance(got, str):
        trend = budget_trend.Trend(verdicts.NOT_JUDGED, verdicts.not_judged(f"budget sweep: {got}"))
    else:
        trend = budget_trend.read(got[0], got[1], budgets, r, t.boundary, k, equivalence=t.margin is None)
    if isinstance(got, str):
        ci = stats.diff_ci(t.va, t.vb, t.paired)
    else:   # the seeds the reading rests on, at the largest budget
        top = max(budgets)
        ci = stats.paired_diff_ci([values[t.a][top][s] for s in got[2]], [values[t.b][top][s] for s in got[2]])
    last = trend.last
    return comparisons.Comparison(
        t.a, t.relation, t.b, trend.verdict, ci=ci, margin=t.margin,
        note="; ".join(x for x in (t.note, trend.text()) if x), p=ci.p_two_sided(t.boundary) if ci else None,
        mde=stats.mde(ci, k), family_size=k, holm_level=trend.level if last else None,
        holm_lo=last.lo if last else None, holm_hi=last.hi if last else None, trend=trend)


def gap_table(values: Values, budgets: list[int], pairs) -> pd.DataFrame:
    """Every compared gap a - b at every budget: mean over the seeds both rows have there, its
    standard error, and the seeds (tables/budget-gaps.csv: the gap as a function of budget)."""
    recs = []
    for a, b in dict.fromkeys(pairs):
        for budget in budgets:
            va, vb = values.get(a, {}).get(budget, {}), values.get(b, {}).get(budget, {})
            seeds = sorted(set(va) & set(vb))
            d = np.array([va[s] - vb[s] for s in seeds])
            recs.append({"a": a, "b": b, "budget": budget, "gap": float(d.mean()) if d.size else None,
                         "se": float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else None,
                         "seeds": " ".join(map(str, seeds))})
    return pd.DataFrame.from_records(recs, columns=["a", "b", "budget", "gap", "se", "seeds"])


@dataclass(frozen=True)
class RecipeArms:
    """The two recipes of a scale: each trained row's twin at the papers' one lr (`primary`)
    and at the other factor (`other`): itself when the factor changes nothing for it (no
    variant-owned parameters, or it already trains at that factor), None when the scale has no
    such twin. A scale may name its rows at either factor (small: x10 with x1 twins; small_long:
    x1 with x10 twins); a claim's rows map through both."""
    primary: dict[str, str | None]
    other: dict[str, str | None]
    factor: float


def recipe_arm(rows, default_scale: float, runs_df: pd.DataFrame) -> RecipeArms | None:
    """The scale's two recipe arms, or None when every trained row with variant-owned
    parameters trains at 1 x (one recipe). With more than one other factor, the largest."""
    owned = dict(zip(runs_df["row"], runs_df["n_variant_params"])) if "n_variant_params" in runs_df else {}
    trained = [r for r in rows if r.name in set(runs_df["row"])]

    def scale(r) -> float:
        return default_scale if r.variant_lr_scale is None else r.variant_lr_scale
    moving = [r for r in trained if owned.get(r.name) != 0]   # None (a run before the count): assume it has some
    factors = sorted({scale(r) for r in moving} - {1.0})
    if not factors:
        return None

    def twin(r, at: float) -> str | None:
        if scale(r) == at or owned.get(r.name) == 0:
            return r.name
        found = next((t for t in trained if scale(t) == at and t.variant == r.variant and t.options == r.options),
                     None)
        return found.name if found is not None else None
    return RecipeArms({r.name: twin(r, 1.0) for r in trained}, {r.name: twin(r, factors[-1]) for r in trained},
                      factors[-1])


def depends_on_recipe(primary, secondary) -> bool:
    """Whether the two arms' comparisons (comparisons.Comparison, pair by pair) have 95% intervals that
    exclude 0 on opposite sides for some pair: what either verdict says, judged or withheld."""
    def side(c) -> int:
        ci = c.ci
        if ci is None or not ci.estimable:
            return 0
        return -1 if ci.hi < 0 else 1 if ci.lo > 0 else 0
    return any(side(x) * side(y) < 0 for x, y in zip(primary, secondary))


def arm_text(secondary: str, scale: float, depends: bool) -> str:
    """What the claim prints after its verdict (the papers' one lr): the other factor's verdict."""
    return (f"the ×{scale:g} arm (variant-owned parameters at {scale:g} × the lr, not the papers' one lr): {secondary}"
            + (" — the verdict depends on the recipe" if depends else ""))


def budgets_of(p) -> list[int]:
    """Every budget a comparison is read at: train.budgets and the full run, ascending."""
    return sorted({*p.train.budgets, p.train.max_steps}) if p.train.budgets else []

