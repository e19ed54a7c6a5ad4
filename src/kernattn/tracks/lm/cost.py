"""What `kernattn plan` counts of the LM track's jobs (kernattn.work): a training run (its
steps from the row's budget chain) and eval-lm (BPB's windows of both splits + CORE's
sequences, each counted at the full context: an upper bound, the prompts being shorter). The
track's own addition to the plan command: `--lm-eval-suite`, below. torch only
inside the counters."""

from __future__ import annotations

from ...config import Params, RunSpec
from ...work import PlannedRun, Work, count_sample, evaluations, row_tables, token_loss, token_sample
from .stages import NAME, runs


def lm_counts(lm, run: RunSpec):
    """(the row's model config, fwd + bwd FLOPs, fwd FLOPs) of one full-context sequence."""
    from .model import build_model
    from .track import row_config

    cfg = row_config(lm, lm.vocab_size, run)
    train, fwd = count_sample(lambda: build_model(cfg, "meta"), token_sample(cfg.vocab_size, cfg.context),
                              token_loss, lambda m, xy: m(xy[0]))
    return cfg, train, fwd


def train_work(p: Params, run: RunSpec) -> Work:
    from .track import VAL_BATCHES, plan

    lm = p.lm
    _, train, fwd = lm_counts(lm, run)
    steps = plan(lm, lm.vocab_size, run)["steps"]
    evals = evaluations(steps, lm.eval_every) * VAL_BATCHES * lm.batch_size
    return Work(train, fwd, lm.batch_size * lm.grad_accum, steps, evals)


def core_sequences(params: Params) -> int | None:
    """CORE's sequences (one per choice or context) over its tasks; None without the eval data
    (it is not downloaded for a plan)."""
    from . import core_eval as core
    from .data import eval_folder

    folder = eval_folder(params, download=False)
    if folder is None or not folder.is_dir():
        return None
    lm = params.lm
    total = 0
    for task in lm.core_fewshot:
        for item in core.load_task(folder, task, lm.core_items):
            total += len(item.choices) or len(item.contexts) or 1
    return total


def eval_work(p: Params, run: RunSpec) -> Work:
    """eval-lm: BPB's windows of both splits and CORE's sequences, forward only."""
    lm = p.lm
    cfg, _, fwd = lm_counts(lm, run)
    windows = 2 * max(1, lm.bpb_tokens // cfg.context)
    return Work(0.0, fwd, 0, 0, windows + (core_sequences(p) or 0))


def planned_run(p: Params, spec: RunSpec, study: str = "") -> PlannedRun:
    """A training run of this track's model (a study's too), as the plan counts it."""
    return PlannedRun(NAME, spec, train_work, study, paper=row_tables(p.lm.rows, spec.row))


PLAN_SECTIONS = ("lm",)  # what the counts above read


def _evaluations(p: Params) -> dict[str, PlannedRun]:
    return {r.run_id: PlannedRun(NAME, r, eval_work, paper=row_tables(p.lm.rows, r.row)) for r in runs(p)}


# the stages `kernattn plan` counts
PLANNED = {"train_lm": lambda p: {r.run_id: planned_run(p, r) for r in runs(p)}, "eval_lm": _evaluations}


# ----------------------------------------------------------------------------- kernattn plan --lm-eval-suite
# What lm-evaluation-harness's standard 0-shot suite costs on an LM row, from the cost plan.
#
#     kernattn plan --scale paper --lm-eval-suite            # every LM row of the scale, on an H100
#
# The suite is the one the linear-attention papers report (docs/tracks.md). Each task's requests
# are its split's documents times the requests the harness makes of one (a multiple-choice task
# scores every choice as its own continuation). The FLOPs are the plan's forward count of one
# full-context sequence of the row's model (cost.lm_counts, as eval-lm's CORE-6 is
# planned) times the requests: an upper bound, since a request is shorter than the context and
# the harness pads a batch only to its longest. Seconds are FLOPs / (peak x the efficiency the
# plan uses for eval-lm on that device).

# task: (documents of the split the harness scores, requests per document), lm-eval 0.4.13:
# LAMBADA (OpenAI) test, HellaSwag validation (4 endings), PIQA validation (2 solutions),
# ARC-Easy and ARC-Challenge test (4 choices; a few questions have 3 or 5), Winogrande (xl)
# validation (2 options, one shared continuation each)
SUITE = {"lambada_openai": (5153, 1), "hellaswag": (10042, 4), "piqa": (1838, 2), "arc_easy": (2376, 4),
         "arc_challenge": (1172, 4), "winogrande": (1267, 2)}


def suite_costs(p: Params, device) -> list[dict]:
    """One line per (LM row, task): requests, forward FLOPs (upper bound) and seconds on `device`."""
    efficiency = device.peak * device.mfu_for("lm", "eval_lm")
    out, seen = [], set()
    for run in runs(p):
        if run.row in seen:
            continue
        seen.add(run.row)
        cfg, _, fwd = lm_counts(p.lm, run)
        for task, (docs, per_doc) in SUITE.items():
            flops = docs * per_doc * fwd
            out.append({"row": run.row, "task": task, "requests": docs * per_doc, "context": cfg.context,
                        "flops": flops, "seconds": flops / efficiency})
    return out


def render(lines: list[dict], device) -> str:
    """The table `kernattn plan --lm-eval-suite` prints, with each row's total."""
    import pandas as pd

    if not lines:
        return "no LM row at this scale: nothing to score"
    frame = pd.DataFrame(lines)
    totals = frame.groupby("row", sort=False)[["requests", "flops", "seconds"]].sum().reset_index()
    totals["task"] = "(suite)"
    frame = pd.concat([frame, totals], ignore_index=True).sort_values("row", kind="stable")
    frame["context"] = frame["context"].map(lambda c: "" if c != c else str(int(c)))   # a total has none
    head = (f"lm-eval 0-shot suite on {device.kind} (peak {device.peak:.3g} FLOP/s, eval-lm efficiency "
            f"{device.mfu_for('lm', 'eval_lm'):.2f}): every request a full context, an upper bound")
    body = frame.to_string(index=False, columns=["row", "task", "requests", "context", "flops", "seconds"],
                           formatters={"flops": "{:.3e}".format, "seconds": "{:.1f}".format})
    return f"{head}\n{body}"


def _suite(params: Params, device) -> str:
    return render(suite_costs(params, device), device)


# `kernattn plan --<name>`: (help, what it prints instead of the plan, given the params and the plan's device)
PLAN_REPORTS = {"lm-eval-suite": ("instead: what lm-eval's standard 0-shot suite costs per task on each LM row "
                                  "(kernattn.tracks.lm.cost)", _suite)}
