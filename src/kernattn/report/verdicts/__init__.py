"""Every verdict rule of the report: what a claim needs to pass, and the words it then prints.

The statistics the rules read (Student t and Welch intervals, the minimum detectable effect,
Holm's step-down procedure: report/stats.py; the paired bootstrap over items: report/bootstrap.py)
decide nothing; the parts of the report (kernattn.tracks.<t>.report*, kernattn.studies.<s>.report,
kernattn.bench.report) gather each claim's numbers and apply the rules here.

levels.py       the level (95%), alpha, one-sided alpha, the MDE's power, the fewest seeds a test needs
words.py        the verdicts a claim prints, combining several into one, reading them below the paper scale
comparisons.py  "a < b", orderings and "a works as well as b" over seeds: Holm families, the
                non-inferiority margin, the gates every comparison passes first (seeds, spread)
gates.py        the gates before a verdict: converged, gap stable at this budget, premise met
                (thresholds: paper_numbers.yaml `gates:`)
budget_trend.py a gap read across a budget sweep (a + b/L): persists, shrinking, reverses, ...
stability.py    "trains stably": no divergence, no non-finite loss, no spike (`stability:`)
studies.py      the studies' rules: a two-outcome reading as a verdict, "some init beats its
                baseline" with Holm across every init, the exact sign test and its power gate
gka_identity.py a GKA row that stayed at the identity is "not comparable" (`gka_identity:`); the
                weights it reads are report/gka_state.py's
line_wrap.py    the line-wrap study: does the bump follow the line width (the shift rule, the
                unwrapped and paragraph votes, the premise, the overall verdict)

The words and levels are re-exported here (`verdicts.REPRODUCED`, `verdicts.LEVEL`); the other
modules are imported by name (`from kernattn.report.verdicts import comparisons`) because they
stand on report/stats.py, which takes its default level from levels.py: re-exporting them here
would make importing the statistics import themselves back.
"""

from .levels import ALPHA, LEVEL, MIN_SEEDS, ONE_SIDED_ALPHA, POWER
from .words import (BY_CONSTRUCTION, CONTRADICTED, HOLDS, INCONCLUSIVE, NOT_COMPARABLE, NOT_ESTIMABLE, NOT_JUDGED,
                    NOT_MEASURED, NOT_RUN, ONE_SEED, PAPER_SCALE, REPRODUCED, at_scale, base_verdict, combine,
                    holds_by_test, is_withheld, not_comparable, not_judged, seeds_text)

__all__ = ["ALPHA", "LEVEL", "MIN_SEEDS", "ONE_SIDED_ALPHA", "POWER", "BY_CONSTRUCTION", "CONTRADICTED", "HOLDS",
           "INCONCLUSIVE", "NOT_COMPARABLE", "NOT_ESTIMABLE", "NOT_JUDGED", "NOT_MEASURED", "NOT_RUN", "ONE_SEED",
           "PAPER_SCALE", "REPRODUCED", "at_scale", "base_verdict", "combine", "holds_by_test", "is_withheld",
           "not_comparable", "not_judged", "seeds_text"]
