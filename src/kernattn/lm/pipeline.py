"""The LM track's part of the DAG, for the Snakefile (rules/lm.smk) and dvc.yaml.

    prepare-lm -> train-lm (one per LM run) -> eval-lm (one per LM run) -> report
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


def add_dvc_stages(stages: dict, params, params_file: str, cache: bool) -> None:
    """Insert lm-prepare, lm-train-<run>, lm-eval-<run> before `report`, and make the report
    depend on the evaluations."""
    from ..pipeline import CODE_DEPS, scale_args, watched

    args = scale_args(params, params_file)
    report = stages.pop("report")
    data = data_outputs(params)
    keys = watched(params, params_file, ("lm", "tracking"))
    stages["lm-prepare"] = {"cmd": f"kernattn prepare-lm {args}", "deps": ["src/kernattn/lm"],
                            "params": watched(params, params_file, ("lm",)),
                            "outs": [{p: {"cache": cache}} for p in data]}
    for run_id in run_ids(params):
        stages[f"lm-train-{run_id}"] = {
            "cmd": f"kernattn train-lm {args} --run {run_id} --stale archive", "deps": [*data, *CODE_DEPS], "params": keys,
            "outs": [{str(run_dir(params.lm, run_id)): {"cache": cache, "persist": True}}]}
        stages[f"lm-eval-{run_id}"] = {
            "cmd": f"kernattn eval-lm {args} --run {run_id}",
            "deps": [*data, final_output(params, run_id), *CODE_DEPS], "params": keys,
            "outs": [{eval_output(params, run_id): {"cache": cache}}]}
    report["deps"] = [*report["deps"], *report_inputs(params)]
    stages["report"] = report
