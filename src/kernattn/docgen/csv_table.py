"""A CSV under the repository as a markdown table, for the docs' results and benchmark pages:
the measured figures stay in the CSVs (with their date, commit and machine) and the pages
render them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import UsageError

REPO = Path(__file__).resolve().parents[3]


def cell(value) -> str:
    if pd.isna(value):
        return ""
    if isinstance(value, float):
        value = f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def csv_table(path: str, columns: list[str] | None = None) -> str:
    """The CSV at `path` (relative to the repository) as a table, `columns` only if given."""
    file = REPO / path
    if not file.is_file():
        raise UsageError(f"docs: {path} is not a file of the repository (a generated csv part names one)")
    frame = pd.read_csv(file)
    missing = [c for c in columns or [] if c not in frame.columns]
    if missing:
        raise UsageError(f"docs: {path} has no column(s) {', '.join(missing)} (it has {', '.join(frame.columns)})")
    frame = frame[columns] if columns else frame
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([f"*From `{path}`.*", "", head, rule, *body])
