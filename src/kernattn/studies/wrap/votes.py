"""What the line-wrap study's votes read besides the bumps (issue 25): a corpus's paragraph lag and
the pre-registered vanish_fraction of the claim 001-bump-paragraph-scale. The votes' rules are
kernattn.report.verdicts.line_wrap (unwrapped_vote, paragraphs_vote, row_verdict).
"""

from __future__ import annotations

from ...report import shipped

CLAIM_ID = "001-bump-paragraph-scale"


def paragraph_lag(peaks: dict) -> int | None:
    """P_c of a corpus's newline_peak() record: its median paragraph length + 1."""
    median = peaks.get("paragraph_median")
    return None if median is None else round(median) + 1


def vanish_fraction() -> float:
    """The pre-registered vanish_fraction of the claim 001-bump-paragraph-scale in the shipped
    paper_numbers.yaml."""
    where = "src/kernattn/report/paper_numbers.yaml"
    doc = shipped.paper_numbers()  # the pre-registered rules the report judges its claims under too
    claim = next((c for c in (doc or {}).get("claims", []) if c.get("id") == CLAIM_ID), {})
    try:
        value = float(claim["vanish_fraction"])
    except (KeyError, TypeError, ValueError):
        value = -1.0
    if not 0 <= value < 1:
        raise ValueError(f"{where}: claim {CLAIM_ID} needs vanish_fraction, a number in [0, 1) fixed before the "
                         f"runs (got {claim.get('vanish_fraction')!r}); restore it from git")
    return value
