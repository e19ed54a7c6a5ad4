"""What `kernattn plan` counts of the line-wrap study: each counterfactual-corpus run as the char
run it repeats (the same model and schedule on another text)."""

from __future__ import annotations

import dataclasses

from ...config import Params
from ...tracks.char import cost as char
from .stages import STUDY, wrap_runs

CLAIM = "001 Section 3.2 (wrap study)"  # what its trainings are for, in the plan's `paper` column


def _trainings(p: Params):
    return {r: dataclasses.replace(char.planned_run(p, spec, STUDY), paper=CLAIM) for r, (_corpus, spec) in wrap_runs(p).items()}


PLAN_SECTIONS = ("studies",)  # its rows, corpora and seeds (the char model's sections: the char track's)


PLANNED = {"train_wrap": _trainings}
