"""What `kernattn plan` counts of the GKA-init study: each run as a training run of its own
track (a char, LM or ViT GKA row with its sigma init changed: the same FLOPs)."""

from __future__ import annotations

import dataclasses

from ...config import Params
from ...tracks import track_module
from .stages import STUDY, gka_runs

CLAIM = "ours (GKA init study)"  # what its trainings are for, in the plan's `paper` column


def _trainings(p: Params):
    return {r: dataclasses.replace(track_module(run.track, "cost").planned_run(p, run.spec, STUDY), paper=CLAIM)
            for r, run in gka_runs(p).items()}


PLAN_SECTIONS = ("studies",)  # its rows, inits and seeds (each track's model sections: the track's)


PLANNED = {"train_gka_init": _trainings}
