"""What `kernattn plan` counts of the prune study: prune@<run>, the zero- and mean-ablation of
every head on the validation windows (2 x layers x heads + 2 evaluations), then three
fine-tunings (ARMS: pruned, control, random) of studies.prune.steps steps, each evaluated at
its start and end. Removing a head saves its share of the pruned arm's FLOPs: not subtracted
(an upper bound)."""

from __future__ import annotations

from ...config import Params, RunSpec, find_run
from ...tracks.char import cost as char
from ...work import PlannedRun, Work, evaluations
from .stages import ARMS, STUDY, prune_runs

CLAIM = "001 Section 4 (prune study)"  # what its jobs are for, in the plan's `paper` column


def prune_work(p: Params, run: RunSpec) -> Work:
    full = char.train_work(p, run)
    tp, steps = p.train, p.studies.prune.steps
    window = tp.eval_batches * tp.batch_size
    ablations = (2 * p.model.n_layer * p.model.n_head + 2) * window
    return Work(full.train_per_sample, full.eval_per_sample, tp.batch_size, len(ARMS) * steps,
                ablations + len(ARMS) * evaluations(steps, steps) * window)


PLAN_SECTIONS = ("studies",)  # its rows and steps (the char model's sections: the char track's)


PLANNED = {"prune": lambda p: {r: PlannedRun(char.NAME, find_run(p, r), prune_work, STUDY, paper=CLAIM)
                               for r in prune_runs(p)}}
