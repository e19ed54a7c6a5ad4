"""What lm-evaluation-harness's standard 0-shot suite costs on an LM row, from the cost plan.

    kernattn plan --scale paper --lm-eval-suite            # every LM row of the scale, on an H100

The suite is the one the linear-attention papers report (docs/tracks.md). Each task's requests
are its split's documents times the requests the harness makes of one (a multiple-choice task
scores every choice as its own continuation). The FLOPs are the plan's forward count of one
full-context sequence of the row's model (plan_flops.lm_counts, as eval-lm's CORE-6 is
planned) times the requests: an upper bound, since a request is shorter than the context and
the harness pads a batch only to its longest. Seconds are FLOPs / (peak x the efficiency the
plan uses for eval-lm on that device)."""

from __future__ import annotations

from ..config import Params

# task: (documents of the split the harness scores, requests per document), lm-eval 0.4.13:
# LAMBADA (OpenAI) test, HellaSwag validation (4 endings), PIQA validation (2 solutions),
# ARC-Easy and ARC-Challenge test (4 choices; a few questions have 3 or 5), Winogrande (xl)
# validation (2 options, one shared continuation each)
SUITE = {"lambada_openai": (5153, 1), "hellaswag": (10042, 4), "piqa": (1838, 2), "arc_easy": (2376, 4),
         "arc_challenge": (1172, 4), "winogrande": (1267, 2)}


def suite_costs(p: Params, device) -> list[dict]:
    """One line per (LM row, task): requests, forward FLOPs (upper bound) and seconds on `device`."""
    from ..tracks.lm.stages import runs
    from .plan_flops import lm_counts

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
