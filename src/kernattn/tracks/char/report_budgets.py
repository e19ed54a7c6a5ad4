"""Two readings of a char comparison beyond its one budget and one recipe (issue 37).

The budget sweep: with train.schedule wsd and train.budgets, every run also has its result at
each shorter budget (its cooldown branched off it: kernattn cooldown), so a gap a - b is read at
every budget. `budget_gate` lets a comparison be tested only when that gap keeps its sign at
every budget and does not shrink from one budget to the next by more than max_shrink of itself
(paper_numbers.yaml `budget_sweep`): a gap that closes as the budget grows is a fact of the
budget.

The recipe arm: a scale may train the variant-owned parameters (banks, tables, learned RoPE
frequencies, GKA's sigma) at train.variant_lr_scale x lr, the papers at 1 x. `recipe_arm` maps
each row with such parameters trained at another factor to its twin at 1 x (a row of the same
variant and options whose variant_lr_scale is 1): the comparisons are judged again on the twins,
and the claim prints both verdicts.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ...report import gates
from .stages import budget_dir

BUDGET_UNSTABLE = "gap depends on the budget"

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


def budget_gate(a: str, b: str, values: Values, budgets: list[int], max_shrink: float) -> gates.Gate | None:
    """The gap a - b read at every budget (mean over the seeds both rows have there); None when
    the scale has no budget sweep."""
    if len(budgets) < 2:
        return None
    gaps = []
    for budget in budgets:
        va, vb = values.get(a, {}).get(budget, {}), values.get(b, {}).get(budget, {})
        seeds = sorted(set(va) & set(vb))
        if not seeds:
            short = a if not va else b
            return gates.gate(BUDGET_UNSTABLE, False, f"no finished run of {short} at budget {budget} "
                                                       f"(kernattn cooldown)")
        gaps.append(float(np.mean([va[s] - vb[s] for s in seeds])))
    text = f"{a} − {b} at budgets " + ", ".join(f"{n}: {g:+.4f}" for n, g in zip(budgets, gaps))
    last = np.sign(gaps[-1])
    if last == 0 or any(np.sign(g) != last for g in gaps):
        return gates.gate(BUDGET_UNSTABLE, False, f"{text}: its sign changes with the budget")
    shrunk = [(m, n) for (m, g), (n, h) in zip(zip(budgets, gaps), zip(budgets[1:], gaps[1:]))
              if abs(h) < (1 - max_shrink) * abs(g)]
    if shrunk:
        m, n = shrunk[0]
        return gates.gate(BUDGET_UNSTABLE, False, f"{text}: it shrinks from budget {m} to {n} by more than "
                                                   f"{max_shrink:.0%} of itself")
    return gates.gate(BUDGET_UNSTABLE, True, f"{text}: same sign, not shrinking")


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


def max_shrink(papers: dict) -> float:
    try:
        value = float((papers.get("budget_sweep") or {})["max_shrink"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("paper_numbers.yaml: budget_sweep needs a number max_shrink (the budget sweep's "
                         "allowance for a gap shrinking between budgets)") from None
    if not 0 <= value < 1:
        raise ValueError(f"paper_numbers.yaml: budget_sweep.max_shrink must lie in [0, 1), got {value}")
    return value


def recipe_arm(rows, default_scale: float, runs_df: pd.DataFrame) -> dict[str, str | None] | None:
    """row -> the row that trains it at variant_lr_scale 1 (itself when the factor changes
    nothing: no variant-owned parameters, or already 1 x; None: no such twin at this scale).
    None when every row already trains at 1 x (no arm to read)."""
    owned = dict(zip(runs_df["row"], runs_df["n_variant_params"])) if "n_variant_params" in runs_df else {}
    trained = set(runs_df["row"])

    def scale(r) -> float:
        return default_scale if r.variant_lr_scale is None else r.variant_lr_scale
    if all(scale(r) == 1.0 for r in rows if r.name in trained):
        return None
    out = {}
    for r in rows:
        if r.name not in trained:
            continue
        if scale(r) == 1.0 or owned.get(r.name) == 0:   # None (a run before the count): assume it has some
            out[r.name] = r.name
            continue
        twin = next((t for t in rows if t.name in trained and scale(t) == 1.0 and t.variant == r.variant
                     and t.options == r.options), None)
        out[r.name] = twin.name if twin is not None else None
    return out


def arm_text(main: str, arm: str, scale: float) -> str:
    """What the claim prints beside its verdict: the twin rows' verdict at 1 x, and whether it
    flips (one is consistent, the other inconsistent, or one of them inconclusive)."""
    from ...report import stats

    flips = main != arm and {stats.base_verdict(main), stats.base_verdict(arm)} & {stats.REPRODUCED,
                                                                                  stats.CONTRADICTED}
    return (f"with the variant-owned parameters at the papers' one lr (×1, not ×{scale:g}): {arm}"
            + (" — the verdict depends on the recipe" if flips else ""))


def budgets_of(p) -> list[int]:
    """Every budget a comparison is read at: train.budgets and the full run, ascending."""
    return sorted({*p.train.budgets, p.train.max_steps}) if p.train.budgets else []

