"""The power calculation and cost model that chose the controls scale's seeds and steps (issue 50),
written and run before any run of the control rows:  .venv/bin/python results/claims/power_controls.py

No control row had been trained, so the spread of its gaps is borrowed: the seed-level sd of the
paired gaps between two rows at the papers' recipe at 800-1,000 steps, from the small (2026-11-28)
and small_long (2026-12-02) sweeps (se x sqrt(n) of their budget-gap tables), the median as the
planning value and the largest as the pessimistic one. For each claim family (k comparisons,
intervals at 1 - 0.05/k two-sided, as budget_trend.level), and n seeds: the half-width of the
gap's t interval, i.e. the smallest gap that n seeds decide (MDE), and whether a non-inferiority
claim at margin delta = 0.01 can pass at a true gap of 0.

Cost: each row's alone step time (controls-steptime-2026-12-02.csv) times a DAG factor measured on
small_long (08ef6fc: a 2,000-step training job took 239 s of wall with two jobs side by side, 2.0x
its rows' alone step time x steps, evaluations and the whole-split final evaluation included)."""

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

HERE = Path(__file__).parent
DELTA = 0.01
FAMILIES = {"rev-gpa-prior-art (3 order claims)": 3, "rev-gka-rbf, rev-sigmoid-softmax (noninferior, alone)": 1}
STEPS, BUDGETS, COOLDOWN = 800, (200, 400), 0.2
DAG_FACTOR = 2.0          # wall per (alone step x step) in a two-job DAG (small_long, 08ef6fc)
SEEDS = {"cope": 3}       # the rest: `n`


def borrowed_sds() -> pd.Series:
    out = []
    for name, budget in (("small-2026-11-28-budget-gaps.csv", 800), ("small_long-2026-12-02-budget-gaps.csv", 1000)):
        g = pd.read_csv(HERE / name)
        g = g[(g.budget == budget) & ~g.a.str.contains("_lr") & ~g.b.str.contains("_lr")]
        n = g.seeds.astype(str).str.split().str.len()
        out.append(g.se * np.sqrt(n))
    return pd.concat(out)


def half_width(sd: float, n: int, k: int) -> float:
    return stats.t.ppf(1 - 0.05 / (2 * k), n - 1) * sd / np.sqrt(n)


def cost_minutes(n: int) -> float:
    steps = pd.read_csv(HERE / "controls-steptime-2026-12-02.csv").set_index("row")["step_ms"] / 1e3
    per_run = DAG_FACTOR * steps * (STEPS + sum(COOLDOWN * b for b in BUDGETS))
    seeds = pd.Series({r: SEEDS.get(r, n) for r in per_run.index})
    return float((per_run * seeds).sum() / 2 / 60)   # two jobs at once


def main() -> int:
    sds = borrowed_sds()
    plan, worst = float(sds.median()), float(sds.max())
    print(f"borrowed paired sd: median {plan:.4f}, max {worst:.4f} ({len(sds)} pairs)")
    for fam, k in FAMILIES.items():
        for n in range(3, 9):
            hw, hw_worst = half_width(plan, n, k), half_width(worst, n, k)
            ni = "yes" if hw < DELTA else "no"
            print(f"{fam}: n={n}: MDE {hw:.4f} (pessimistic {hw_worst:.4f}); non-inferiority at 0.01 "
                  f"reachable at a true gap of 0: {ni}; char training {cost_minutes(n):.0f} min on 2 cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
