"""What `kernattn plan` counts of the toy track: a training run of its model, FLOPs counted on
the meta device (kernattn.work), evaluated at 0, every eval_every and at the end."""

from __future__ import annotations

from ...config import Params, RunSpec
from ...work import PlannedRun, Work, count_sample, evaluations, token_loss, token_sample
from .stages import NAME, runs

PLAN_SECTIONS = ("toy",)


def train_work(p: Params, run: RunSpec) -> Work:
    from .data import TOKENS
    from .model import Toy

    tp = p.toy
    train, fwd = count_sample(lambda: Toy(tp.vocab, tp.d_model, tp.n_head, run.variant, run.options),
                              token_sample(tp.vocab, tp.context), token_loss, lambda m, xy: m(xy[0]))
    val_windows = len(range(0, TOKENS - TOKENS * 3 // 4 - tp.context, tp.context))  # the track's _val()
    return Work(train, fwd, tp.batch_size, tp.max_steps, evaluations(tp.max_steps, tp.eval_every) * val_windows)


def planned_run(p: Params, spec: RunSpec, study: str = "") -> PlannedRun:
    return PlannedRun(NAME, spec, train_work, study)


PLANNED = {"train_toy": lambda p: {r.run_id: planned_run(p, r) for r in runs(p)}}
