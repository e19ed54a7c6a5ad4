"""What the studies' report parts share: a study's context read from its summary.json (or the
command that makes it), its claims "not run" without one, its tables written, and a mean's 95%
interval as a dict (and as CSV columns).

A study outside the main DAG is read where it ran: `snakemake --cores all studies` writes each
summary.json, and the report reads what exists, so the main DAG's report builds without them. A
missing study is a section saying how to produce it, and its claims read "not run"."""

from __future__ import annotations

import json
from pathlib import Path

from ..report import stats, verdicts
from ..report.claims import ClaimResult
from .common import command, summary_path


def study_section(ctx, study: str, build) -> dict:
    """The context of `study`'s part: build(summary) (with "present": True), or {"present":
    False} when its summary.json is missing or of another scale; both with the summary's path,
    the command that produces it and the study's params (studies.<study>)."""
    params = ctx.params
    path = summary_path(params, study)
    summary = read_summary(path)
    own = {"path": str(path), "command": command(), "params": getattr(params.studies, study)}
    if summary is None or summary.get("scale") != params.scale:
        return {"present": False, **own}
    return {**build(summary), **own}


def study_claims(ctx, kinds, section: dict, judge) -> list[ClaimResult]:
    """The claims of `kinds`: judge(claim, section, scale), or "not run" (naming the command)
    when the study's summary is missing."""
    if not section["present"]:
        return [ClaimResult(claim, verdicts.NOT_RUN, scale=ctx.scale, ours="—", detail=f"produce it with: {command()}")
                for claim in ctx.claims_of(kinds)]
    return [judge(claim, section, ctx.scale) for claim in ctx.claims_of(kinds)]


def write_tables(ctx, frames: dict) -> None:
    """A part's tables as CSV under the report's tables/ (every number the page shows)."""
    for name, frame in frames.items():
        frame.to_csv(ctx.tables / name, index=False)


def read_summary(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def ci_of(values, skip_nonfinite: bool = False) -> dict | None:
    """stats.mean_ci_of (None left out; NaN raises unless skip_nonfinite) as a dict: the form
    the studies' contexts, templates and ci_cols read."""
    ci = stats.mean_ci_of(values, skip_nonfinite)
    return None if ci is None else {"n": ci.n, "mean": ci.mean, "lo": ci.lo, "hi": ci.hi}


def ci_cols(prefix: str, ci) -> dict:
    """A mean-CI dict or a DiffCI as CSV columns (empty when there is none)."""
    if ci is None:
        return {f"{prefix}_mean": None, f"{prefix}_lo": None, f"{prefix}_hi": None}
    mean = ci["mean"] if isinstance(ci, dict) else ci.diff
    lo, hi = (ci["lo"], ci["hi"]) if isinstance(ci, dict) else (ci.lo, ci.hi)
    return {f"{prefix}_mean": mean, f"{prefix}_lo": lo, f"{prefix}_hi": hi}
