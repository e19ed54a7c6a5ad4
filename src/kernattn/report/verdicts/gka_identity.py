"""GKA's identity rule (issue 37, paper_numbers.yaml `gka_identity`): a GKA row whose bandwidths
left it attending to itself says nothing about Gaussian kernel attention.

A GKA row whose mean diagonal attention weight at the end is above `max_diagonal` on any of its
runs reads "not comparable (sigma stayed at identity: ...)" in every claim that compares it; a
run whose weight could not be read makes the claim "not judged (diagonal weight not read: ...)".
The weights are read by report/gka_state.py (DiagonalReading, per run, from its checkpoint).
"""

from __future__ import annotations

import dataclasses

from .. import shipped
from ..claims import ClaimResult
from ..gka_state import DiagonalReading
from . import words


def max_diagonal(papers: dict) -> float:
    """paper_numbers.yaml `gka_identity.max_diagonal`; a claims file of one's own without the
    block is read under the shipped file's rule (as build.load_paper_numbers does for the gates)."""
    rule = papers.get("gka_identity")
    if rule is None:
        rule = shipped.paper_numbers()["gka_identity"]
    return float(rule["max_diagonal"])


def identity_text(reading: DiagonalReading, threshold: float) -> str:
    """'gka: mean diagonal weight at the end gka-s0 0.412, gka-s1 not read (why) (identity above 0.9, ...)'."""
    runs = ", ".join(f"{r} {v:.3f}" if v is not None else f"{r} not read ({reading.why.get(r, '?')})"
                     for r, v in reading.values.items())
    return (f"{reading.row}: mean diagonal weight at the end {runs or 'of no run'} "
            f"(identity above {threshold:g}, paper_numbers.yaml gka_identity)")


def identity_verdict(verdict: str, reading: DiagonalReading | None, threshold: float) -> str:
    """The rule on a verdict of a claim that compares the row (module docstring). Any run above
    the threshold: the comparison mixes in a model that never left the identity, a fact of its
    initialisation. A run not read leaves a tested verdict standing on a guess: not judged.
    A verdict that tested nothing (not run, not judged, not comparable) is kept then."""
    if reading is None or verdict == words.NOT_RUN or not reading.values:
        return verdict
    above = reading.above(threshold)
    if above:
        runs = ", ".join(f"{r} {reading.values[r]:.3f}" for r in above)
        why = (f"sigma stayed at identity: {reading.row}'s mean diagonal weight above {threshold:g} on "
               f"{len(above)} of {len(reading.values)} runs ({runs})")
        head = f"{words.NOT_COMPARABLE} ("
        other = verdict[len(head):-1] if verdict.startswith(head) else ""
        return words.not_comparable("; ".join(x for x in (why, other) if x))
    tested = not (verdict.startswith(words.NOT_COMPARABLE) or words.is_withheld(verdict))
    if reading.unread and tested:
        run = reading.unread[0]
        return words.not_judged(f"diagonal weight not read: {run}: {reading.why.get(run, 'unknown')}")
    return verdict


def apply_identity(res: ClaimResult, reading: DiagonalReading | None, threshold: float) -> ClaimResult:
    """`res` under the rule, its readings beside the detail; a changed verdict is also its
    comparisons' (the pairs table must not keep a verdict the claim no longer has)."""
    if reading is None or res.verdict == words.NOT_RUN:
        return res
    verdict = identity_verdict(res.verdict, reading, threshold)
    if verdict != res.verdict:
        res.verdict = verdict
        res.comparisons = [dataclasses.replace(c, verdict=verdict) for c in res.comparisons]
    res.detail = "; ".join(x for x in (res.detail, identity_text(reading, threshold)) if x)
    return res
