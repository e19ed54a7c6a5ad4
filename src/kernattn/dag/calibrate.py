"""The cost plan's CPU model, fitted to what a DAG of this machine measured (`kernattn timing --calibrate`).

The plan (kernattn.dag.plan) predicts a planned job's wall time on a CPU as

    start-up + FLOPs / (peak x efficiency)

peak: this CPU's float32 matmul rate, measured when the plan is made (bench.peaks); efficiency: the
share of it the job's model reaches, per track (per stage for an evaluation); start-up: what a job
costs before and after its loop (Python and torch imports, data, model, MLflow, the last writes).
This module fits the last two from one DAG's record, each from a different measurement, so that the
plan's per-rule ratio against the benchmark files (kernattn.dag.timing) is a check, not an identity:

- start-up = the median over training jobs of (benchmark wall - the loop's own wall, final.json `wall_s`);
- efficiency of a key = its jobs' FLOPs / (peak x their loops' wall seconds); a job without a loop
  record (an evaluation) uses its benchmark wall less the start-up.

The result is the `cpu:` block of src/kernattn/bench/gpus.yaml, printed with its source to paste there.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from ..stage import Stage

if TYPE_CHECKING:  # pandas is imported where a frame is made: the plan reads efficiency_key alone
    import pandas as pd

FINAL = "final.json"
EVAL_STAGES = ("eval_lm",)  # planned stages that only evaluate: their own efficiency, not their track's


def efficiency_key(stage: str, track: str) -> str:
    """What a job's efficiency is looked up by: an evaluation stage's name, else its track."""
    return stage if stage in EVAL_STAGES else track


def loop_seconds(stage: Stage, run: str | None) -> float | None:
    """The job's own loop wall time (final.json `wall_s`), where the job writes one."""
    for out in stage.outputs(run):
        if out.endswith(FINAL) and Path(out).is_file():
            try:
                return float(json.loads(Path(out).read_text())["wall_s"])
            except (ValueError, KeyError, TypeError):
                return None
    return None


def measurements(bench: pd.DataFrame, plan: pd.DataFrame, table: dict[str, Stage]) -> pd.DataFrame:
    """One row per planned job that ran: key, FLOPs, benchmark wall, loop wall (or NaN)."""
    import pandas as pd

    walls = {(r.rule, r.run if isinstance(r.run, str) else None): r.wall_s for r in bench.itertuples()}
    rows = []
    for r in plan.itertuples():
        run = r.run if isinstance(r.run, str) else None
        if (r.stage, run) not in walls or r.stage not in table:
            continue
        loop = loop_seconds(table[r.stage], run)
        rows.append({"stage": r.stage, "run": run, "key": efficiency_key(r.stage, r.track), "flops": r.flops,
                     "wall_s": walls[(r.stage, run)], "loop_s": float("nan") if loop is None else loop})
    return pd.DataFrame(rows, columns=["stage", "run", "key", "flops", "wall_s", "loop_s"])


def fit(jobs: pd.DataFrame, peak: float) -> dict:
    """{startup_s, efficiency: {key: share of peak}} from `measurements`."""
    looped = jobs.dropna(subset=["loop_s"])
    if looped.empty:
        raise ValueError("no planned job has a loop record (final.json wall_s): run the DAG's trainings first")
    startup = statistics.median(looped["wall_s"] - looped["loop_s"])
    busy = jobs["loop_s"].where(jobs["loop_s"].notna(), (jobs["wall_s"] - startup).clip(lower=1e-3))
    per_key = jobs.assign(busy=busy).groupby("key")[["flops", "busy"]].sum()
    return {"startup_s": round(float(startup), 2),
            "efficiency": {k: round(float(row.flops / (peak * row.busy)), 4) for k, row in per_key.iterrows()}}
