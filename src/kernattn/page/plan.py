"""The page's own cost-plan part (the shape of every part: report/part.py): what the DAG of this
scale and of the paper scale cost, from `kernattn plan --out` (kernattn.dag.plan): per stage
its jobs, FLOPs, GPU-hours, longest wall time and SLURM time limit, and the whole DAG's
GPU-hours (per track and per source document), critical path and wall time on the cluster
planned for. It judges no claim. The plans are read from results/<scale>/plan/ (the DAG's
`plan` stage writes the scale's own there), else from results/plan/ (kept in git: the paper
scale's on H100); otherwise the part names the command that writes them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..plan_files import plan_arguments, plan_csv, summary_path
from ..report.claims import ClaimResult
from ..report.part import ClaimKind, ReportContext

OUTLINE = ("part-plan", "Cost plan", (("plan", "The plan before launch: FLOPs, GPU-hours and wall time"),))
CLAIM_KINDS: dict[str, ClaimKind] = {}
PAPER = "paper"
COMMITTED = Path("results/plan")  # plans kept in git (the paper's on H100), shown when the scale has none


def command(params, scale: str) -> str:
    return f"kernattn plan --scale {scale} {plan_arguments(params, scale)}"


def stage_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per stage: its jobs, FLOPs and GPU-hours summed, its longest job's wall time and
    time limit."""
    grouped = frame.groupby("stage", sort=False)
    return pd.DataFrame({"jobs": grouped.size(), "FLOPs": grouped["flops"].sum(),
                         "GPU-hours": grouped["gpu_hours"].sum(), "MFU": grouped["mfu"].first(),
                         "longest wall (h)": grouped["wall_h"].max(),
                         "SLURM limit (min)": grouped["slurm_minutes"].max()}).reset_index()


def _html(df: pd.DataFrame) -> str:
    return df.to_html(index=False, border=0, classes="num-table", na_rep="—",
                      float_format=lambda x: f"{x:.3g}")


def entry(ctx: ReportContext, scale: str) -> dict:
    """One plan's context: found (summary and stage table) or the command that writes it."""
    found = [c for c in (Path(plan_csv(ctx.params, scale)), COMMITTED / f"{scale}.csv")
             if c.is_file() and summary_path(c).is_file()]
    if not found:
        return {"scale": scale, "found": False, "command": command(ctx.params, scale)}
    csv_path = found[0]
    summary = json.loads(summary_path(csv_path).read_text())
    stages = stage_table(pd.read_csv(csv_path))
    stages.to_csv(ctx.tables / f"plan-{scale}.csv", index=False)
    return {"scale": scale, "found": True, "path": str(csv_path), "summary": summary, "html": _html(stages),
            "command": command(ctx.params, scale)}


def section(ctx: ReportContext) -> dict:
    scales = list(dict.fromkeys([ctx.params.scale, PAPER]))
    return {"plans": [entry(ctx, s) for s in scales]}


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    return []
