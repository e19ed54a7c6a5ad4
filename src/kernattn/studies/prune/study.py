"""The prune study's table: every pruned run in one file (issue 17, part 3).

    kernattn prune-study --params params.yaml [--scale S]

Reads <studies.out_dir>/prune/<run>/summary.json of every run of the study (kernattn prune)
and writes <studies.out_dir>/prune/summary.json ({"runs": [...]}), prune.csv (one row per
run: gpa-long's premise, the removed heads, the losses with and without fine-tuning, the
random-head control's, params and FLOPs saved) and prune_rows.csv (one row per architecture:
its premise, met when every run has a bank below analysis.strength_threshold, and its mean
costs), atomically. The report judges per architecture (kernattn.studies.prune.report).
"""

from __future__ import annotations

import argparse
import json

from ...config import params_from_args
from ...io import atomic_write_json, atomic_write_text
from ..common import SUMMARY, root
from .stages import prune_output, prune_runs

COLUMNS = ("run_id", "row", "seed", "premise_met", "premise_why", "weakest_strength", "removed", "loss_before",
           "loss_after_removal", "loss_after_fine_tune", "loss_control_fine_tune", "cost_after_removal",
           "cost_after_fine_tune", "random_removed", "loss_random_after_removal", "loss_random_after_fine_tune",
           "cost_random_after_removal", "cost_random_after_fine_tune", "params_saved", "params_saved_fraction",
           "flops_saved_per_token", "flops_saved_fraction", "fine_tune_steps")
ROW_COLUMNS = ("row", "runs", "premise_met", "premise_why", "cost_after_removal", "cost_after_fine_tune",
               "cost_random_after_removal", "cost_random_after_fine_tune")


def row_premise(runs: list[dict], threshold: float) -> tuple[bool, str]:
    """An architecture meets gpa-long's premise when every one of its runs has a bank below
    the threshold (the claim is about such a bank, in every trained model)."""
    # a summary from before the premise was recorded: flagged_weak, and the k weakest removed
    missing = [r for r in runs if not r.get("premise_met", r.get("flagged_weak", False))]
    weakest = min(r.get("weakest_strength", min(r["strength"])) for r in runs)
    if not missing:
        return True, f"every run has a bank below threshold {threshold:g}; weakest {weakest:.3g}"
    return False, (f"no bank below threshold {threshold:g} in {len(missing)} of {len(runs)} runs; "
                   f"weakest {weakest:.3g}")


def by_row(summary: dict) -> list[dict]:
    """One line per architecture (row): its premise and its mean costs over seeds (the report
    gives their intervals)."""
    import statistics

    out = []
    for row in dict.fromkeys(r["row"] for r in summary["runs"]):
        runs = [r for r in summary["runs"] if r["row"] == row]
        met, why = row_premise(runs, summary["threshold"])
        out.append({"row": row, "runs": len(runs), "premise_met": met, "premise_why": why,
                    **{k: statistics.fmean(r[k] for r in runs) for k in ROW_COLUMNS[4:]}})
    return out


def read_study(params) -> dict:
    from ...errors import UsageError

    runs = []
    for run_id in prune_runs(params):
        path = prune_output(params, run_id)
        try:
            runs.append(json.loads(open(path, encoding="utf-8").read()))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: unreadable ({exc}); produce it with: kernattn prune --params "
                             f"{params.path} --scale {params.scale} --run {run_id}") from None
    return {"study": "prune", "scale": params.scale, "params_digest": params.digest(),
            "steps": params.studies.prune.steps, "k": params.studies.prune.k,
            "threshold": params.analysis.strength_threshold, "runs": runs}


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    summary = read_study(params)
    out = root(params) / "prune"
    table = pd.DataFrame([{k: (str(r[k]) if k == "removed" else r[k]) for k in COLUMNS} for r in summary["runs"]],
                         columns=list(COLUMNS))
    atomic_write_text(out / "prune.csv", table.to_csv(index=False))
    rows = pd.DataFrame(by_row(summary), columns=list(ROW_COLUMNS))
    atomic_write_text(out / "prune_rows.csv", rows.to_csv(index=False))
    atomic_write_json(out / SUMMARY, summary)
    for r in rows.to_dict("records"):
        print(f"kernattn prune-study: {r['row']}: premise {'met' if r['premise_met'] else 'not met'} "
              f"({r['premise_why']}); mean cost without fine-tuning {r['cost_after_removal']:+.4f} "
              f"(random heads {r['cost_random_after_removal']:+.4f}), after fine-tuning "
              f"{r['cost_after_fine_tune']:+.4f} (random heads {r['cost_random_after_fine_tune']:+.4f})")
    print(f"kernattn prune-study: {len(table)} runs; wrote {out / SUMMARY}, prune.csv, prune_rows.csv")
    return 0
