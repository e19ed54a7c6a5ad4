"""The LM report's uncertainty on CORE: per row, a paired bootstrap over items of the row's
centered CORE minus the reference row's, per task and for the mean (report.bootstrap: the same
items resampled for both rows, per task for the mean; each item's score is its correctness
averaged over the seeds both rows share)."""

from __future__ import annotations

import pandas as pd

from ...report import bootstrap
from .core_eval import KINDS, RANDOM_BASELINE

TASKS = tuple(KINDS)
BOOT_RESAMPLES = 4000
BOOT_SEED = 0


def item_scores(results: list[dict], task: str, seeds: list[int]) -> list[float] | None:
    """Per item: correctness averaged over `seeds`; None if an evaluation lacks per-item output."""
    by_seed = {x["seed"]: x["core"]["tasks"][task].get("correct") for x in results}
    cols = [by_seed.get(s) for s in seeds]
    if any(c is None for c in cols) or len({len(c) for c in cols}) != 1:
        return None
    return [sum(v) / len(v) for v in zip(*cols)]


def core_bootstrap(groups: dict[str, list[dict]], ref: str | None) -> dict[str, dict]:
    """Per row but the reference: paired bootstrap of (row - reference) centered CORE, per task and mean."""
    base = groups.get(ref) if ref is not None else None
    out = {}
    for key, rs in groups.items():
        if key == ref or base is None:
            continue
        seeds = sorted({x["seed"] for x in rs} & {x["seed"] for x in base})
        pairs = {t: (item_scores(rs, t, seeds), item_scores(base, t, seeds)) for t in TASKS}
        if not seeds or any(a is None or b is None or len(a) != len(b) for a, b in pairs.values()):
            continue
        res = {"seeds": seeds, "against": ref}
        for i, t in enumerate(TASKS):
            res[t] = bootstrap.paired_bootstrap([pairs[t]], bootstrap.centered_diff_statistic([RANDOM_BASELINE[t]]),
                                            BOOT_RESAMPLES, seed=BOOT_SEED + i)
        res["mean"] = bootstrap.paired_bootstrap([pairs[t] for t in TASKS],
                                             bootstrap.centered_diff_statistic([RANDOM_BASELINE[t] for t in TASKS]),
                                             BOOT_RESAMPLES, seed=BOOT_SEED + len(TASKS))
        out[key] = res
    return out


def boot_table(rows: list[dict]) -> pd.DataFrame:
    recs = []
    for r in rows:
        if not r.get("boot"):
            continue
        for t in (*TASKS, "mean"):
            b = r["boot"][t]
            recs.append({"row": r["key"], "against": r["boot"]["against"], "task": t, "seeds": " ".join(map(str, r["boot"]["seeds"])),
                         "items": b.n_items, "centered_diff": b.estimate, "ci_lo": b.lo, "ci_hi": b.hi,
                         "resamples": b.resamples})
    return pd.DataFrame(recs, columns=["row", "against", "task", "seeds", "items", "centered_diff", "ci_lo", "ci_hi",
                                       "resamples"])
