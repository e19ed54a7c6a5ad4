"""What the studies share: their folder, a study's summary.json, the params a study run trains
with, and a finished char run's model. No torch at import (the stage table imports this).

Everything a study writes lands under studies.out_dir (results/<scale>/studies/), one folder per
study: <studies.out_dir>/<study>/ (its stages module names what is inside).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..config import Params

SUMMARY = "summary.json"


def root(p: Params) -> Path:
    return Path(p.studies.out_dir)


def summary_path(p: Params, study: str) -> Path:
    """<studies.out_dir>/<study>/summary.json: what the report reads of each study."""
    return root(p) / study / SUMMARY


def final(folder, run_id: str) -> str:
    """A study run's final.json (an engine run folder <folder>/<run id>/): written last."""
    return f"{folder}/{run_id}/final.json"


def command() -> str:
    """What produces the studies outside the main DAG."""
    return "snakemake --cores all studies"


def study_params(params: Params, data_dir: str | None, out_dir: str) -> Params:
    """`params` training into `out_dir` (and reading `data_dir` when given), tracked in the
    studies' MLflow experiment."""
    data = params.data if data_dir is None else dataclasses.replace(params.data, out_dir=str(data_dir))
    return dataclasses.replace(
        params, data=data, train=dataclasses.replace(params.train, out_dir=str(out_dir)),
        tracking=dataclasses.replace(params.tracking, experiment=f"{params.tracking.experiment}-studies"))


def study_run(params: Params, runs: dict, command: str, run_id: str):
    """runs[run_id], the run `command` trains; an unknown id is one line listing the study's runs."""
    from ..errors import UsageError

    if run_id not in runs:
        raise UsageError(f"{params.path}: no run {run_id!r} in the {command} study of scale {params.scale!r}; "
                         f"runs: {', '.join(runs) or 'none'}")
    return runs[run_id]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """A study's training command: --run and the engine's run options (--fresh, --stale, ...)."""
    from ..engine.options import add_run_options

    parser.add_argument("--run", required=True, metavar="RUN_ID", help="a run of the study (see the stage table)")
    add_run_options(parser)


def trained_model(params: Params, spec, device, params_file: str = "params.yaml"):
    """(trained model in eval mode, final.json, the corpus data) of a finished run of `params`
    (train.out_dir/<spec.run_id>); a missing or mismatched run is one line naming the command."""
    from ..tracks.char.analysis.analyze_gpa import load_models
    from ..tracks.char.data import load_data
    from ..tracks.char.stages import data_dir

    data = load_data(data_dir(params), params.model.context)
    _, model, final_record = load_models(params, spec, data, device, params_file)
    return model, final_record, data
