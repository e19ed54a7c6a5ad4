"""The power calculation that chose the small_long scale's seeds and steps (issue 48), on the
small scale's budget sweep of 2026-11-28 (small-2026-11-28-budget-gaps.csv), run before any
small_long run:  .venv/bin/python results/claims/power_small_long.py

For each compared pair: fit g = a + b/steps to its gaps at 200/400/800 steps (weights 1/se^2;
steps stand in for the learning-rate sum, which is proportional to them under one WSD recipe),
predict the gap at 2,000 steps, and take the seed-level sd of the gap at 800 steps (se x sqrt(n)).
The seeds n that decide it at 2,000 steps: the interval at 1 - 0.05/k (k = 4, Bonferroni over
a figure's comparisons; t with n - 1 df) either excludes 0 (|gap| > delta) or, for a gap under
delta, fits inside +-delta (the equivalence reading). None: more than 30 seeds."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

DELTA, K, TARGET, SEEDS = 0.01, 4, 2000, range(3, 31)


def seeds_needed(gap: float, sd: float) -> int | None:
    for n in SEEDS:
        half = stats.t.ppf(1 - 0.05 / (2 * K), n - 1) * sd / np.sqrt(n)
        if (abs(gap) > DELTA and half < abs(gap)) or (abs(gap) <= DELTA and half + abs(gap) < DELTA):
            return n
    return None


def main() -> int:
    gaps = pd.read_csv(Path(__file__).with_name("small-2026-11-28-budget-gaps.csv"))
    gaps["sd"] = gaps["se"] * np.sqrt(gaps["seeds"].str.split().str.len())
    print("a,b,arm,gap_200,gap_400,gap_800,sd_800,limit_a,predicted_2000,seeds_needed")
    for (a, b), g in gaps.groupby(["a", "b"], sort=False):
        g = g.sort_values("budget")
        x = np.c_[np.ones(len(g)), 1.0 / g["budget"].to_numpy()]
        w = 1.0 / g["se"].to_numpy() ** 2
        coef = np.linalg.solve(x.T @ (w[:, None] * x), x.T @ (w * g["gap"].to_numpy()))
        pred, sd = coef[0] + coef[1] / TARGET, float(g["sd"].iloc[-1])
        arm = "x1" if a.endswith("_lr1") else "x10"
        cells = ",".join(f"{v:+.4f}" for v in g["gap"])
        print(f"{a},{b},{arm},{cells},{sd:.4f},{coef[0]:+.4f},{pred:+.4f},{seeds_needed(pred, sd) or '>30'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
