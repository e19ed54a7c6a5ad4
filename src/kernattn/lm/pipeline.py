"""The LM track's files in the DAG (kernattn.dag.stages builds its stages from them):

    prepare_lm -> train_lm (one per LM run) -> eval_lm (one per LM run) -> report
"""

from __future__ import annotations

from pathlib import Path

from .data import OUTPUTS
from .runs import eval_path, lm_runs, run_dir


def data_outputs(params) -> list[str]:
    return [str(Path(params.lm.data_dir) / name) for name in OUTPUTS]


def run_ids(params) -> list[str]:
    return [r.run_id for r in lm_runs(params.lm)]


def final_output(params, run_id: str) -> str:
    return str(run_dir(params.lm, run_id) / "final.json")


def eval_output(params, run_id: str) -> str:
    return str(eval_path(params.lm, run_id))


def report_inputs(params) -> list[str]:
    """What the report reads of the LM track: every run's evaluation."""
    return [eval_output(params, r) for r in run_ids(params)]
