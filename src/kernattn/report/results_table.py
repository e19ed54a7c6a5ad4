"""The README's results table, generated from a published claims CSV (results/claims/*.csv, the
report's tables/claims.csv of one run), never written by hand.

    kernattn results-table [--readme README.md] [--check]

The README holds the table between two markers; the opening one names the CSV it comes from:

    <!-- results-table: results/claims/small-2026-11-28.csv -->
    ...
    <!-- /results-table -->

Without --check the block is rewritten from that CSV; with --check nothing is written and the
exit status is 1 when the block differs from what the CSV gives (the suite runs it).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from ..errors import UsageError
from ..io import atomic_write_text

OPEN = re.compile(r"<!-- results-table: (?P<csv>\S+) -->\n")
CLOSE = "<!-- /results-table -->"
COLUMNS = (("claim", "claim"), ("statement", "what the paper says"), ("verdict", "verdict"),
           ("ours", "what we measured"))


def _cell(value) -> str:
    text = "—" if pd.isna(value) or value == "" else " ".join(str(value).split())
    return text.replace("|", "\\|")


def table(csv: Path) -> str:
    """The markdown table of a claims CSV: one line per claim, in its order."""
    try:
        df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError) as exc:
        raise UsageError(f"{csv}: not a readable claims CSV ({exc}); publish one from report/tables/claims.csv") from None
    missing = [c for c, _ in COLUMNS if c not in df.columns]
    if missing:
        raise UsageError(f"{csv}: no column {', '.join(missing)}; a claims CSV is the report's tables/claims.csv")
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    rows = ["| " + " | ".join(_cell(r[c]) for c, _ in COLUMNS) + " |" for _, r in df.iterrows()]
    return "\n".join([head, rule, *rows]) + "\n"


def block(readme_text: str, where: str) -> tuple[int, int, str]:
    """(start, end, csv) of the table's block in the README text (between the markers)."""
    m = OPEN.search(readme_text)
    end = readme_text.find(CLOSE, m.end()) if m else -1
    if m is None or end < 0:
        raise UsageError(f"{where}: no '<!-- results-table: CSV -->' ... '{CLOSE}' block; add one where the "
                         f"table goes")
    return m.end(), end, m.group("csv")


def sync(readme: Path, check: bool) -> bool:
    """Rewrite (or, with `check`, compare) the README's table; True when it was already current."""
    text = readme.read_text(encoding="utf-8")
    start, end, csv = block(text, str(readme))
    wanted = table(readme.parent / csv)
    current = text[start:end] == wanted
    if not current and not check:
        atomic_write_text(readme, text[:start] + wanted + text[end:])
    return current


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--readme", default="README.md", type=Path, help="the README holding the block")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the table is stale")


def run(args: argparse.Namespace) -> int:
    current = sync(args.readme, args.check)
    if args.check and not current:
        print(f"kernattn results-table: {args.readme}'s table differs from its CSV; run kernattn results-table")
        return 1
    return 0
