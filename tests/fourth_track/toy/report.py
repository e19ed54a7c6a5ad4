"""The toy track's part of the report: each run's final validation loss. It judges no claim."""

from __future__ import annotations

import json
from pathlib import Path

from ...report.part import ReportContext, ReportError
from .stages import final_output, runs

OUTLINE = ("part-toy", "Toy track: copying a lagged token", (("toy-runs", "Runs"),))
CLAIM_KINDS: dict = {}


def section(ctx: ReportContext) -> dict:
    rows = []
    for run in runs(ctx.params):
        path = Path(final_output(ctx.params, run.run_id))
        if not path.is_file():
            raise ReportError(f"{path} is missing: run `kernattn train-toy --run {run.run_id}`")
        final = json.loads(path.read_text())
        rows.append({"run": run.run_id, "variant": run.variant, "val_loss": final["val_loss"]})
    return {"runs": rows}


def claims(ctx: ReportContext, section: dict) -> list:
    return []
