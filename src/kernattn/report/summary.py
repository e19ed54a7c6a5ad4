"""The page's first screen: what held, one table per document.

Each claim's verdict string (ClaimResult.shown: "at scale small: not judged (gap not stable
...); with the variant-owned parameters ...", "consistent at small", "holds (test ...)") is
the whole reasoning; a reader scanning the page first wants its first word or two. The
badge (`verdict_badge`) is that head, as text, with the colour class the page styles it by;
the rest of the string stays on the page, folded under the row. `documents` groups the
judged claims by document (the claim's `paper`), in the order of the four seeds, with each
row's effect and interval printed where the claim has a single number.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ..config.rows import DOCUMENT_KEYS, SEEDS   # the four documents, in page order
from . import unit_tests, verdicts
from .verdicts import budget_trend, gates
from .claims import ClaimResult
from .part import num

# (head of the verdict without its scale, badge text, class). First match wins, so a longer
# head stands before a shorter one it starts with ("holds by construction" before "holds",
# "not supported" is its own head, never "supported"). Classes: ok (the claim held), bad (it
# failed), unk (tested or gated without an answer), na (no test of it here).
BADGES = (
    (verdicts.BY_CONSTRUCTION, "by construction", "ok"),
    # a gap read across a budget sweep (report.verdicts.budget_trend): the word says where it goes
    (budget_trend.PERSISTS, "holds, persists", "ok"),
    (budget_trend.SHRINKING, "holds, shrinking", "ok"),
    (budget_trend.UNRESOLVED, "holds, limit open", "ok"),
    (budget_trend.REVERSES, "reverses", "bad"),
    (budget_trend.NO_DIFFERENCE, "no difference", "bad"),
    (verdicts.HOLDS, "holds", "ok"),
    (verdicts.REPRODUCED, "reproduced", "ok"),
    ("consistent at ", "consistent", "ok"),
    ("supported", "supported", "ok"),               # studies.gka_init.report.SUPPORTED: the sign test passed
    (verdicts.CONTRADICTED, "contradicted", "bad"),
    ("inconsistent at ", "inconsistent", "bad"),
    (unit_tests.FAILS, "fails", "bad"),
    ("not supported", "not supported", "unk"),
    (verdicts.INCONCLUSIVE, "inconclusive", "unk"),
    (verdicts.NOT_JUDGED, "not judged", "unk"),
    (verdicts.NOT_ESTIMABLE, "not estimable", "unk"),
    (gates.PREMISE, "premise unmet", "unk"),
    (verdicts.NOT_RUN, "not run", "na"),
    (verdicts.NOT_COMPARABLE, "not comparable", "na"),
    (verdicts.NOT_MEASURED, "not measured", "na"),
)

# Titles of the documents paper_numbers.yaml's `papers` does not name (it lists the two GPA
# papers only; a title there wins), and the heading of claims that are no document's
# ("ours": a question gka-paper leaves open, which we test).
TITLES = {"002": "Self-Attention as Kernel Regression in JAX/Flax NNX (blog post)",
          "003": "Projection-Free Transformers via Gaussian Kernel Attention"}
OTHER_HEADINGS = {"ours": "Our own questions (left open by the documents)",
                  "reviewers": "The reviewers' questions: the controls the documents lack"}


def _head(text: str) -> str:
    """The verdict without the "at scale S: " that verdicts.at_scale puts before it."""
    if text.startswith("at scale ") and ": " in text:
        return text.split(": ", 1)[1]
    return text


def verdict_badge(verdict_text: str) -> tuple[str, str]:
    """(badge text, css class) of a verdict as the page prints it, or of a verdict proper.

    Only the head counts: what follows (the reason in parentheses, a second recipe's arm after
    "; ") is the detail the page folds away. An unknown verdict keeps its first two words
    (before any parenthesis) and the class "unk", so a new verdict shows, never vanishes."""
    head = _head(" ".join(str(verdict_text).split()))
    for prefix, label, css in BADGES:
        if head.startswith(prefix):
            return label, css
    words = head.split("(", 1)[0].split(";", 1)[0].split()
    return (" ".join(words[:2]) or "no verdict"), "unk"


def fmt_number(x) -> str:
    """A table's number: 4 decimals for an effect, thousands separators for a count."""
    v = num(x)
    if v is None:
        return "—"
    if v.is_integer() and v != 0:   # a count (parameters, steps), never an interval's end
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.2e}"
    return f"{v:.4f}"


@dataclass(frozen=True)
class Row:
    result: ClaimResult
    label: str            # the badge
    css: str
    effect: str           # the claim's single number, or —
    interval: str         # [lo, hi] of that number, or why there is none here
    n_pairs: int          # comparisons with an interval (drawn in the forest plots) when there is no single number

    @property
    def id(self) -> str:
        return self.result.claim["id"]


def row(c: ClaimResult) -> Row:
    label, css = verdict_badge(c.shown)
    lo, hi = num(c.lo), num(c.hi)
    interval = f"[{fmt_number(lo)}, {fmt_number(hi)}]" if lo is not None and hi is not None else "—"
    pairs = 0 if num(c.estimate) is not None else sum(1 for x in c.comparisons if x.ci is not None and x.ci.estimable)
    return Row(c, label, css, fmt_number(c.estimate), interval, pairs)


def heading(paper: str, papers: dict) -> str:
    """"gpa-short: <title>" for a document, its own heading for claims that are no document's."""
    if paper in OTHER_HEADINGS:
        return OTHER_HEADINGS[paper]
    title = ((papers.get("papers") or {}).get(paper) or {}).get("title") or TITLES.get(paper)
    name = f"{DOCUMENT_KEYS.get(paper, paper)} ({paper})"
    return f"{name}: {title}" if title else name


def documents(claims: list[ClaimResult], papers: dict) -> list[dict]:
    """[{paper, heading, short, id, rows, tally}] one per document, in seed order (000 to 003, then any
    other in the order its first claim comes); rows in paper_numbers.yaml's order. `tally`:
    "2 consistent, 3 not judged", the badges counted in order of first appearance."""
    grouped: dict[str, list[Row]] = {}
    for c in claims:
        grouped.setdefault(str(c.claim["paper"]), []).append(row(c))
    order = [p for p in SEEDS if p in grouped] + [p for p in grouped if p not in SEEDS]
    out = []
    for p in order:
        rows = grouped[p]
        tally = ", ".join(f"{n} {label}" for label, n in Counter(r.label for r in rows).items())
        out.append({"paper": p, "heading": heading(p, papers), "short": "Ours" if p in OTHER_HEADINGS else DOCUMENT_KEYS.get(p, p),
                    "id": f"summary-{re.sub(r'[^A-Za-z0-9_-]+', '-', p)}", "rows": rows, "tally": tally})
    return out


def tally(claims: list[ClaimResult]) -> dict:
    """The claims summary as numbers (tables/claims-summary.json, a DVC metric): how many claims
    got each badge, in all and per document (by its key)."""
    out = {"claims": len(claims), "by_verdict": {}, "by_document": {}}
    for c in claims:
        label = verdict_badge(c.shown)[0]
        doc = DOCUMENT_KEYS.get(c.claim.get("paper"), c.claim.get("paper") or "none")
        out["by_verdict"][label] = out["by_verdict"].get(label, 0) + 1
        mine = out["by_document"].setdefault(doc, {})
        mine[label] = mine.get(label, 0) + 1
    return out
