"""Where the DAG's time went: each job's Snakemake benchmark file, per rule and against the plan.

Every rule of the Snakefile writes `results/<scale>/benchmarks/<rule>[-<run>].tsv` (dag.snakemake
.benchmark_of): Snakemake's own record of the job (wall `s`, `cpu_time`, `max_rss` in MB, I/O in
MB). This module reads them back:

    jobs(folder)            one row per job: rule, run, wall_s, cpu_s, max_rss_mb, io_in_mb, io_out_mb, end
    per_rule(frame)         jobs, wall summed / mean / longest, CPU summed, peak RSS, per rule
    span(frame)             the DAG's wall clock (first job's start to last job's end) and the CPU it used
    against_plan(frame, plan)  each rule's planned seconds (kernattn plan's per-job wall) beside the
                            measured ones and their ratio; a rule the plan has no model for says so

Rule names are Python identifiers (no `-`), so a file name splits at its first `-` into rule and run.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from .snakemake import BENCHMARKS

JOB_COLUMNS = ("rule", "run", "wall_s", "cpu_s", "max_rss_mb", "io_in_mb", "io_out_mb", "end")
NOT_PLANNED = "not planned"


def folder_of(scale: str) -> Path:
    return Path(BENCHMARKS.format(scale=scale))


def _number(value: str | None) -> float:
    """A benchmark field as a float; Snakemake writes NA where psutil could not read it."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def read_job(path: Path) -> dict:
    """One benchmark file: its last line (a `repeat` benchmark has several; the last is the newest)."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows:
        raise ValueError(f"{path}: an empty benchmark file (the job was killed while Snakemake wrote it); "
                         f"delete it and rerun the job")
    row = rows[-1]
    rule, _, run = path.stem.partition("-")
    return {"rule": rule, "run": run or None, "wall_s": _number(row.get("s")), "cpu_s": _number(row.get("cpu_time")),
            "max_rss_mb": _number(row.get("max_rss")), "io_in_mb": _number(row.get("io_in")),
            "io_out_mb": _number(row.get("io_out")), "end": path.stat().st_mtime}


def jobs(folder: str | Path) -> pd.DataFrame:
    """Every job's benchmark under `folder` (an empty frame when none was written)."""
    files = sorted(Path(folder).glob("*.tsv"))
    return pd.DataFrame([read_job(f) for f in files], columns=list(JOB_COLUMNS))


def per_rule(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per rule, the costliest first."""
    g = frame.groupby("rule", sort=False)
    out = pd.DataFrame({"jobs": g.size(), "wall_s": g["wall_s"].sum(), "mean_wall_s": g["wall_s"].mean(),
                        "longest_s": g["wall_s"].max(), "cpu_s": g["cpu_s"].sum(),
                        "max_rss_mb": g["max_rss_mb"].max()}).reset_index()
    return out.sort_values("wall_s", ascending=False, kind="stable").reset_index(drop=True)


def span(frame: pd.DataFrame) -> dict:
    """The DAG's wall clock as its benchmark files tell it (first start to last end; a job's start
    is its file's time less its wall time), the job-seconds and CPU-seconds summed, and the mean
    number of busy cores (CPU seconds over the span)."""
    if frame.empty:
        return {"jobs": 0, "span_s": 0.0, "job_s": 0.0, "cpu_s": 0.0, "busy_cores": float("nan")}
    start = float((frame["end"] - frame["wall_s"]).min())
    wall = float(frame["end"].max()) - start
    cpu = float(frame["cpu_s"].sum())
    return {"jobs": int(len(frame)), "span_s": wall, "job_s": float(frame["wall_s"].sum()), "cpu_s": cpu,
            "busy_cores": cpu / wall if wall > 0 else float("nan")}


def against_plan(frame: pd.DataFrame, plan: pd.DataFrame | None) -> pd.DataFrame:
    """Per rule: measured seconds (summed over its jobs), planned seconds (kernattn plan's wall_h
    of the same jobs), and measured / planned. Only jobs both have are compared; a rule whose
    jobs the plan does not model reads NOT_PLANNED."""
    rows = []
    planned = {} if plan is None else {(r.stage, r.run if isinstance(r.run, str) else None): 3600.0 * r.wall_h
                                       for r in plan.itertuples()}
    for rule, g in frame.groupby("rule", sort=False):
        pairs = [(m, planned[(rule, run)]) for m, run in zip(g["wall_s"], g["run"]) if (rule, run) in planned]
        if not pairs:
            rows.append({"rule": rule, "jobs": len(g), "measured_s": float(g["wall_s"].sum()), "planned_s": None,
                         "ratio": None, "note": NOT_PLANNED})
            continue
        measured, predicted = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        rows.append({"rule": rule, "jobs": len(pairs), "measured_s": measured, "planned_s": predicted,
                     "ratio": measured / predicted if predicted > 0 else None, "note": ""})
    return pd.DataFrame(rows, columns=["rule", "jobs", "measured_s", "planned_s", "ratio", "note"])
