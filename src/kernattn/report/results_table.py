"""The README's results table, generated from a published claims CSV (results/claims/*.csv, the
report's tables/claims.csv of one run), never written by hand.

    kernattn results-table [--readme README.md] [--check]

The README holds the table between two markers; the opening one names the CSV it comes from,
or `latest`: the newest `<scale>-<YYYY-MM-DD>[-<commit>].csv` under results/claims/ (by the date
in its name; two of the same date must be named instead). It may name several CSVs (space
separated): each claim's line then comes from the last of them that ran it (its verdict not
"not run"), else from the first, and a column says which scale judged it:

    <!-- results-table: latest -->
    ...
    <!-- /results-table -->

One line per claim: its id, its document's key, the statement, the verdict's badge (the word
or two the report's summary shows: report.summary.verdict_badge) and the effect with its
interval where the claim has one number. The whole reasoning stays in the CSV. Without
--check the block is rewritten; with --check nothing is written and the exit status is 1
when the block differs from what the CSV gives (the suite runs it).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from ..errors import UsageError
from ..io import atomic_write_text

OPEN = re.compile(r"<!-- results-table: (?P<csv>\S+(?: \S+)*) -->\n")
CLOSE = "<!-- /results-table -->"
LATEST = "latest"
# tracks/char/report_budgets.arm_text, after "; " in a verdict
ARM = re.compile(r"; the ×(?P<factor>[0-9.]+) arm \([^)]*\): (?P<verdict>.*?)(?P<depends> — the verdict depends on "
                 r"the recipe)?$")
PUBLISHED = re.compile(r"(?P<scale>[a-z_]+)-(?P<date>\d{4}-\d{2}-\d{2})(?:-[0-9a-f]{7,40})?\.csv")
COLUMNS = ("claim", "paper", "statement", "verdict", "ours", "estimate", "ci_lo", "ci_hi")
STATEMENT_CHARS, MEASURED_CHARS = 90, 60


def _short(value, limit: int) -> str:
    text = "—" if pd.isna(value) or value == "" else " ".join(str(value).split())
    text = text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
    return text.replace("|", "\\|")


def _effect(r) -> str:
    """The claim's one number with its interval, or (no number) what was measured, shortened."""
    from .summary import fmt_number

    est, lo, hi = (float(r[c]) if str(r[c]).strip() else None for c in ("estimate", "ci_lo", "ci_hi"))
    if est is None:
        return _short(r["ours"], MEASURED_CHARS)
    return fmt_number(est) + (f" [{fmt_number(lo)}, {fmt_number(hi)}]" if lo is not None and hi is not None else "")


def read_claims(csv: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError) as exc:
        raise UsageError(f"{csv}: not a readable claims CSV ({exc}); publish one from report/tables/claims.csv") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise UsageError(f"{csv}: no column {', '.join(missing)}; a claims CSV is the report's tables/claims.csv")
    return df.assign(scale=df["scale"] if "scale" in df.columns else "?")


def merged(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """One line per claim, in the first frame's order (claims only later ones hold after it):
    the line of the last frame that ran the claim, else the first frame's."""
    from .summary import verdict_badge

    chosen: dict[str, pd.Series] = {}
    for df in frames:
        for _, r in df.iterrows():
            if r["claim"] not in chosen or verdict_badge(r["verdict"])[0] != "not run":
                chosen[r["claim"]] = r
    return pd.DataFrame(list(chosen.values()))


def table(csvs: Path | list[Path]) -> str:
    """The markdown table of one claims CSV (or of several: merged), one line per claim."""
    from ..config.rows import DOCUMENT_KEYS
    from .summary import verdict_badge

    csvs = [csvs] if isinstance(csvs, Path) else csvs
    frames = [read_claims(c) for c in csvs]
    df = merged(frames)
    several = len(csvs) > 1
    head = ("| claim | document | what the paper says | verdict (papers' recipe) | other recipe "
            "| effect [95% interval] or what we measured |" + (" scale |" if several else ""))
    arms = [other_arm(r["verdict"]) for _, r in df.iterrows()]
    rows = [f"| {r['claim']} | {DOCUMENT_KEYS.get(r['paper'], r['paper'] or '—')} | "
            f"{_short(r['statement'], STATEMENT_CHARS)} | {verdict_badge(r['verdict'])[0]} | {arm or '—'} | {_effect(r)} |"
            + (f" {r['scale']} |" if several else "")
            for (_, r), arm in zip(df.iterrows(), arms)]
    scales = [f["scale"].iloc[0] if len(f) else "?" for f in frames]   # a run's scale: its first claim's
    recipes = ("" if any(arms) else " One recipe: every parameter at the papers' one learning rate; no other arm "
               "trained at this scale.")
    named = ", ".join(f"`{c.name}`" for c in csvs)
    caption = (f"*From {named} (scale {', '.join(scales)}{'; each claim from the run that judged it' if several else ''})."
               f"{recipes}*")
    return "\n".join([caption, "", head, "|---|---|---|---|---|---|" + ("---|" if several else ""), *rows]) + "\n"


def other_arm(verdict: str) -> str:
    """The badge of the claim's other recipe arm, printed after its verdict by the char track
    ("; the ×10 arm (...): <verdict>[ — the verdict depends on the recipe]"), or ""."""
    from .summary import verdict_badge

    m = ARM.search(" ".join(str(verdict).split()))
    if m is None:
        return ""
    depends = " (depends on the recipe)" if m.group("depends") else ""
    return f"×{m.group('factor')}: {verdict_badge(m.group('verdict'))[0]}{depends}"


def latest(folder: Path) -> Path:
    """The newest published claims CSV in `folder`, by the date in its name."""
    found = sorted((m.group("date"), f) for f in folder.glob("*.csv") if (m := PUBLISHED.fullmatch(f.name)))
    if not found:
        raise UsageError(f"{folder}: no published claims CSV (<scale>-<YYYY-MM-DD>.csv); name one in the marker")
    newest = [f for d, f in found if d == found[-1][0]]
    if len(newest) > 1:
        raise UsageError(f"{folder}: {', '.join(f.name for f in newest)} share the newest date; name one in the "
                         f"README's marker instead of 'latest'")
    return newest[0]


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
    wanted = table(latest(readme.parent / "results" / "claims") if csv == LATEST
                   else [readme.parent / c for c in csv.split()])
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
