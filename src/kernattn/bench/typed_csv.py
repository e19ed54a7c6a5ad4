"""CSV files with a schema (column -> type), written atomically and read back typed.

The benchmark stages (bench-attention, bench) and gpu-check write their rows through
`write_csv_atomic`; `read_rows` reads such a file back. How values are written: None as an
empty cell, bool as true / false, float with repr (inf and nan as such), the rest with str.
Read back: an empty int cell is None; a bool cell must be true or false.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from ..io import atomic_path


def _format(value: Any, typ: type) -> str:
    if value is None:
        return ""
    if typ is bool:
        return "true" if value else "false"
    if typ is float:
        return repr(float(value)) if math.isfinite(value) else str(value)
    return str(value)


def _parse(text: str, typ: type) -> Any:
    if typ is bool:
        if text not in ("true", "false"):
            raise ValueError(f"expected true/false, got {text!r}")
        return text == "true"
    if typ is int:
        return None if text == "" else int(text)
    if typ is float:
        return float(text)
    return text


def write_csv_atomic(path: Path, schema: dict[str, type], rows: list[dict[str, Any]]) -> None:
    """Write `rows` (dicts with every key of `schema`) to `path`, header first, through a
    temporary file in the same folder and os.replace (kernattn.io.atomic_path): a row
    lacking a column raises KeyError and leaves `path` as it was."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(schema))
        for row in rows:
            writer.writerow([_format(row[k], t) for k, t in schema.items()])


def read_rows(path: Path, schema: dict[str, type]) -> list[dict[str, Any]]:
    """Rows of a CSV written by `write_csv_atomic`, typed by `schema` (ValueError on a bad
    header or value)."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        if header != list(schema):
            raise ValueError(f"{path}: header {header} is not the schema {list(schema)}")
        return [{k: _parse(v, t) for (k, t), v in zip(schema.items(), line, strict=True)} for line in reader]
