"""The verdicts a claim can print, and how several combine into one and read below the paper scale.

A claim's verdict is one of: "reproduced", "contradicted", "inconclusive" (a test was made);
"not judged (<why>)" or "variance not estimable" (a gate withheld the test: `not_judged`,
`is_withheld`); "not run" (a row not trained at this scale); for facts that follow from the
architecture, not from training (parameter counts), "holds by construction" when our count equals
the paper's formula and "not comparable (<why>)" when our model is built differently by design;
"holds (test ...)" for a property of the library the test suite checks; "not measured here".

Every verdict carries its scale (`at_scale`): at the paper scale it reads as is; below it a
run can agree or disagree with a paper, never reproduce or contradict it: "reproduced" reads
"consistent at tiny", "contradicted" "inconsistent at tiny", any other verdict "at scale tiny:
<verdict>"; the page styles the two scales apart.
"""

from __future__ import annotations

from collections.abc import Sequence

REPRODUCED = "reproduced"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
NOT_JUDGED = "not judged"
NOT_ESTIMABLE = "variance not estimable"
NOT_RUN = "not run"
BY_CONSTRUCTION = "holds by construction"
NOT_COMPARABLE = "not comparable"
NOT_MEASURED = "not measured here"
HOLDS = "holds"
PAPER_SCALE = "paper"


def not_judged(why: str) -> str:
    """A verdict withheld by a gate: "not judged (2 seeds)", "not judged (converged: ...)"."""
    return f"{NOT_JUDGED} ({why})"


def seeds_text(n: int) -> str:
    return f"{n} seed{'' if n == 1 else 's'}"


ONE_SEED = not_judged(seeds_text(1))


def is_withheld(verdict: str) -> bool:
    """A verdict a gate gave (not judged, variance not estimable): no test was made."""
    return verdict.startswith(NOT_JUDGED) or verdict == NOT_ESTIMABLE


def combine(verdicts: Sequence[str]) -> str:
    """One verdict for a claim made of several comparisons: contradicted if any is; not run if
    any row is missing; reproduced if all are; else the first withheld verdict (its gate);
    otherwise inconclusive."""
    verdicts = list(verdicts)
    if not verdicts:
        return NOT_RUN
    for v in verdicts:
        if v not in (REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_RUN) and not is_withheld(v):
            raise ValueError(f"unknown verdict {v!r}")
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if NOT_RUN in verdicts:
        return NOT_RUN
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    return next((v for v in verdicts if is_withheld(v)), INCONCLUSIVE)


def not_comparable(reason: str) -> str:
    return f"{NOT_COMPARABLE} ({reason})"


def holds_by_test(tests: str) -> str:
    """A property of the library checked by the test suite: "holds (test ...)"."""
    return f"{HOLDS} (test {tests})"


_BELOW_PAPER = {REPRODUCED: "consistent at {scale}", CONTRADICTED: "inconsistent at {scale}"}


def at_scale(verdict: str, scale: str, regime: str = "") -> str:
    """The verdict as the report prints it (module docstring): below the paper scale
    "consistent / inconsistent at <scale>" or "at scale <scale>: <verdict>", the scale followed
    by its training regime where the part names one ("small (early training, 0.4 epoch)")."""
    if scale == PAPER_SCALE:
        return verdict
    where = f"{scale} ({regime})" if regime else scale
    if verdict in _BELOW_PAPER:
        return _BELOW_PAPER[verdict].format(scale=where)
    return f"at scale {where}: {verdict}"


def base_verdict(text: str) -> str:
    """The verdict without its scale (at_scale's inverse)."""
    for verdict, shown in _BELOW_PAPER.items():
        head = shown.split("{")[0]
        rest = text[len(head):]
        if text.startswith(head) and (" " not in rest or (" (" in rest and rest.endswith(")") and ": " not in rest)):
            return verdict
    if text.startswith("at scale ") and ": " in text:
        return text.split(": ", 1)[1]
    return text
