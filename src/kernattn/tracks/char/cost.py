"""What `kernattn plan` counts of the char track's jobs (kernattn.work): a training run and a
budget-sweep cooldown branch, each with the char model's own FLOPs per sample. The studies that
retrain char rows (wrap, prune) count with `train_work` too. torch only inside the counters."""

from __future__ import annotations

import dataclasses
import json

from ...config import Params, RunSpec, find_run
from ...config.char import cooldown_start
from ...work import PlannedRun, Work, count_sample, evaluations, row_tables, token_sample
from .stages import NAME, budget_runs, data_dir, data_outputs, runs, split_budget_run_id

# The Dickens symbol set's size (corpus.py): the vocabulary of a plan made before `prepare` ran,
# and of the benchmark, which needs no prepared data.
DICKENS_VOCAB = 93

_COUNTS: dict[str, tuple[float, float]] = {}  # one count per char model: the studies repeat the rows


def vocab_size(p: Params) -> int:
    """The prepared corpus's vocabulary when prepare ran, else the Dickens symbol set's size."""
    from .data import VOCAB_FILE, load_vocab

    return len(load_vocab(data_dir(p))) if (data_dir(p) / VOCAB_FILE).is_file() else DICKENS_VOCAB


def sample_counts(p: Params, run: RunSpec) -> tuple[float, float]:
    """(fwd + bwd, fwd) FLOPs of one context window of the row's char model."""
    from .model import GPT

    mp, vocab = p.model, vocab_size(p)
    key = json.dumps([vocab, dataclasses.asdict(mp), run.variant, run.options], sort_keys=True, default=str)
    if key not in _COUNTS:
        _COUNTS[key] = count_sample(lambda: GPT(vocab, mp, run.variant, run.options), token_sample(vocab, mp.context),
                                    lambda m, xy: m.loss(*xy), lambda m, xy: m(xy[0]))
    return _COUNTS[key]


def eval_windows(p: Params, steps: int) -> int:
    """The windows every evaluation of a `steps`-step run scores (eval_batches x batch each)."""
    tp = p.train
    return evaluations(steps, tp.eval_every) * tp.eval_batches * tp.batch_size


def train_work(p: Params, run: RunSpec) -> Work:
    train, fwd = sample_counts(p, run)
    tp = p.train
    return Work(train, fwd, tp.batch_size, tp.max_steps, eval_windows(p, tp.max_steps))


def cooldown_work(p: Params, run: RunSpec) -> Work:
    """cooldown@<run>-b<budget> (the budget sweep): the branch trains from its long run's kept
    checkpoint at cooldown_start(budget) to the budget; the steps before it are the long run's,
    counted there. Its evaluations are counted as a run of that many steps' (an upper bound by
    one: the branch starts from the long run's evaluation at its branch point)."""
    _, budget = split_budget_run_id(run.run_id)
    train, fwd = sample_counts(p, run)
    steps = budget - cooldown_start(budget, p.train.cooldown_fraction)
    return Work(train, fwd, p.train.batch_size, steps, eval_windows(p, steps))


def planned_run(p: Params, spec: RunSpec, study: str = "") -> PlannedRun:
    """A training run of this track's model (a study's too), as the plan counts it."""
    return PlannedRun(NAME, spec, train_work, study, paper=row_tables(p.matrix.rows, spec.row))


def _cooldowns(p: Params) -> dict[str, PlannedRun]:
    """Each branch as its row's run under the branch's id (its work reads the budget from it)."""
    out = {}
    for branch in budget_runs(p):
        run_id, budget = split_budget_run_id(branch)
        spec = find_run(p, run_id)
        out[branch] = PlannedRun(NAME, dataclasses.replace(spec, run_id=branch), cooldown_work, budget=budget,
                                 paper=row_tables(p.matrix.rows, spec.row))
    return out


PLAN_SECTIONS = ("data", "model", "train", "matrix")  # what the counts above read


def plan_inputs(p: Params) -> list[str]:
    """The prepared corpus: its vocabulary sizes the model."""
    return data_outputs(p)


# the stages `kernattn plan` counts (kernattn.work)
PLANNED = {"train": lambda p: {r.run_id: planned_run(p, r) for r in runs(p)}, "cooldown": _cooldowns}
