"""The page's own "Where the time went" part (the shape of every part: report/part.py): what each
job of this scale's DAG cost, from the Snakemake benchmark file every rule writes
(kernattn.dag.timing): time per rule, the slowest jobs, the DAG's wall clock against the CPU
it used, and each rule's measured time beside `kernattn plan`'s prediction for it (the only
check the plan's model gets before it is used at a scale nobody has run). It judges no claim.

The report is the DAG's last job, so its own benchmark is not among them; a rule that has not
run at this scale (or ran before benchmarks were recorded) is absent, and the part says where
the files are expected.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..dag import timing
from ..plan_files import plan_csv
from ..report.claims import ClaimResult
from ..report.part import ClaimKind, ReportContext

OUTLINE = ("part-timing", "Where the time went",
           (("timing", "Each rule's cost, measured, and the plan's prediction beside it"),))
CLAIM_KINDS: dict[str, ClaimKind] = {}
SLOWEST = 10  # jobs listed by name


def _html(df: pd.DataFrame) -> str:
    return df.to_html(index=False, border=0, classes="num-table", na_rep="—",
                      float_format=lambda x: f"{x:.3g}")


def _plan(ctx: ReportContext) -> tuple[pd.DataFrame | None, str]:
    path = Path(plan_csv(ctx.params, ctx.params.scale))
    return (pd.read_csv(path), str(path)) if path.is_file() else (None, str(path))


def section(ctx: ReportContext) -> dict:
    folder = timing.folder_of(ctx.params.scale)
    frame = timing.jobs(folder)
    if frame.empty:
        return {"found": False, "folder": str(folder)}
    rules = timing.per_rule(frame)
    slowest = frame.sort_values("wall_s", ascending=False, kind="stable").head(SLOWEST)
    plan, plan_path = _plan(ctx)
    versus = timing.against_plan(frame, plan)
    rules.to_csv(ctx.tables / "timing-rules.csv", index=False)
    versus.to_csv(ctx.tables / "timing-plan.csv", index=False)
    ratios = versus["ratio"].dropna()
    return {
        "found": True, "folder": str(folder), "span": timing.span(frame),
        "rules": _html(rules), "slowest": _html(slowest[["rule", "run", "wall_s", "cpu_s", "max_rss_mb"]]),
        "versus": _html(versus), "plan_path": plan_path if plan is not None else None,
        "ratio_range": (float(ratios.min()), float(ratios.max())) if len(ratios) else None}


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    return []
