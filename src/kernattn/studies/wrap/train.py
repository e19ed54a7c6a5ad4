"""The line-wrap study's runs: the matrix run <row>-s<seed> on a counterfactual corpus.

    kernattn train-wrap --params P [--scale S] --run <row>-<corpus>-s<seed> [--fresh] [--stale archive]

The char track (kernattn.tracks.char.track.CharTrack) on the engine, with data.out_dir moved to
the counterfactual corpus (<studies.out_dir>/wrap/data/<corpus>/, same vocabulary) and
train.out_dir to <studies.out_dir>/wrap/runs/. Everything else is the track's own: model,
schedule, seed, batch order (the same batches per seed as the original runs), resume, SIGTERM,
MLflow (experiment <the track's experiment>-studies).
"""

from __future__ import annotations

import argparse

from ...config import Params, params_from_args
from ...engine.options import run_track
from ...tracks.char.track import CharTrack
from ..common import add_run_arguments, study_params, study_run
from .stages import wrap_data_dir, wrap_run_dir, wrap_runs


def study_track(params: Params, run_id: str) -> CharTrack:
    """The track of one line-wrap run; an unknown run id is one line listing the study's runs."""
    corpus, spec = study_run(params, wrap_runs(params), "train-wrap", run_id)
    return CharTrack(study_params(params, str(wrap_data_dir(params, corpus)), str(wrap_run_dir(params))), spec)


add_arguments = add_run_arguments


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    return run_track(study_track(params, args.run), args)
