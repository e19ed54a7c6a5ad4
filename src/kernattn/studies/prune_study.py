"""The prune study's table: every pruned run in one file (issue 17, part 3).

    kernattn prune-study --params params.yaml [--scale S]

Reads <studies.out_dir>/prune/<run>/summary.json of every run of the study (kernattn prune)
and writes <studies.out_dir>/prune/summary.json ({"runs": [...]}) and prune.csv (one row per
run: the removed heads, the four losses, the costs, params and FLOPs saved), atomically. The
report pools the runs (kernattn.studies.report).
"""

from __future__ import annotations

import argparse
import json

from ..config import load_params
from ..io import atomic_write_json, atomic_write_text
from . import SUMMARY, prune_output, prune_runs, root

COLUMNS = ("run_id", "row", "seed", "removed", "loss_before", "loss_after_removal", "loss_after_fine_tune",
           "loss_control_fine_tune", "cost_after_removal", "cost_after_fine_tune", "params_saved",
           "params_saved_fraction", "flops_saved_per_token", "flops_saved_fraction", "fine_tune_steps")


def read_study(params) -> dict:
    from ..errors import UsageError

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

    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    summary = read_study(params)
    out = root(params) / "prune"
    table = pd.DataFrame([{k: (str(r[k]) if k == "removed" else r[k]) for k in COLUMNS} for r in summary["runs"]],
                         columns=list(COLUMNS))
    atomic_write_text(out / "prune.csv", table.to_csv(index=False))
    atomic_write_json(out / SUMMARY, summary)
    cost = table["cost_after_fine_tune"]
    print(f"kernattn prune-study: {len(table)} runs; cost after fine-tuning (pruned - control) mean "
          f"{cost.mean():+.4f}, range [{cost.min():+.4f}, {cost.max():+.4f}]; wrote {out / SUMMARY}")
    return 0
