"""What the studies' report modules share: a study's summary.json read, and a mean's 95%
interval as a dict (and as CSV columns)."""

from __future__ import annotations

import json
from pathlib import Path

from ..report import stats


def read_summary(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def ci_of(values) -> dict | None:
    """Student t mean interval (stats.mean_ci) of the values that are not None, as a dict."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    ci = stats.mean_ci(vals)
    return {"n": ci.n, "mean": ci.mean, "lo": ci.lo, "hi": ci.hi}


def ci_cols(prefix: str, ci) -> dict:
    """A mean-CI dict or a DiffCI as CSV columns (empty when there is none)."""
    if ci is None:
        return {f"{prefix}_mean": None, f"{prefix}_lo": None, f"{prefix}_hi": None}
    mean = ci["mean"] if isinstance(ci, dict) else ci.diff
    lo, hi = (ci["lo"], ci["hi"]) if isinstance(ci, dict) else (ci.lo, ci.hi)
    return {f"{prefix}_mean": mean, f"{prefix}_lo": lo, f"{prefix}_hi": hi}
