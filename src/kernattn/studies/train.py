"""Training runs of the studies: the char track (kernattn.train.CharTrack) on the engine, with
another corpus or another attention option, into the study's folder.

    kernattn train-wrap     --params P [--scale S] --run <row>-<corpus>-s<seed> [--fresh] [--stale archive]
    kernattn train-gka-init --params P [--scale S] --run <row>-init_<init>-s<seed> [--fresh] [--stale archive]

A line-wrap run is the matrix run <row>-s<seed> with data.out_dir moved to the counterfactual
corpus (<studies.out_dir>/wrap/data/<corpus>/, same vocabulary) and train.out_dir to
<studies.out_dir>/wrap/runs/; a GKA-init run is the matrix row with options.init_sigma set, in
<studies.out_dir>/gka_init/runs/. Everything else is `kernattn train`'s: model, schedule, seed,
batch order (the same batches per seed as the original runs, on their own corpus), resume,
SIGTERM, MLflow (experiment <tracking.experiment>-studies). GKA runs also log, on every val
line, each head's bandwidth: `sigma_L<layer>H<head>` (from 1).
"""

from __future__ import annotations

import argparse
import dataclasses

from ..config import Params, load_params
from ..engine.options import add_run_options, run_track
from ..errors import UsageError
from ..train import CharTrack
from . import gka_run_dir, gka_runs, scale_options, wrap_data_dir, wrap_run_dir, wrap_runs

HELP = "train one run of a study (line-wrap corpus or GKA init) through the engine (resumable)"


def study_params(params: Params, data_dir: str | None, out_dir: str) -> Params:
    """`params` training into `out_dir` (and reading `data_dir` when given), tracked in the
    studies' MLflow experiment."""
    data = params.data if data_dir is None else dataclasses.replace(params.data, out_dir=str(data_dir))
    return dataclasses.replace(
        params, data=data, train=dataclasses.replace(params.train, out_dir=str(out_dir)),
        tracking=dataclasses.replace(params.tracking, experiment=f"{params.tracking.experiment}-studies"))


class GKAInitTrack(CharTrack):
    """The char track, logging each GKA head's bandwidth on its val lines."""

    def line_fields(self, split: str, step: int, values: dict) -> dict:
        fields = super().line_fields(split, step, values)
        if split == "val":
            for layer, block in enumerate(self.model.blocks, 1):
                for head, sigma in enumerate(block.attn.sigma.detach().cpu().tolist(), 1):
                    fields[f"sigma_L{layer}H{head}"] = sigma
        return fields


def study_track(params: Params, command: str, run_id: str) -> CharTrack:
    """The track of one study run (`command`: train-wrap or train-gka-init)."""
    runs = wrap_runs(params) if command == "train-wrap" else gka_runs(params)
    if run_id not in runs:
        raise UsageError(f"{params.path}: no run {run_id!r} in the {command} study of scale {params.scale!r}; "
                         f"runs: {', '.join(runs) or 'none'}")
    what, spec = runs[run_id]
    if command == "train-wrap":
        return CharTrack(study_params(params, str(wrap_data_dir(params, what)), str(wrap_run_dir(params))), spec)
    return GKAInitTrack(study_params(params, None, str(gka_run_dir(params))), spec)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scale_options(parser)
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="a run of the study (see the stage table)")
    add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    return run_track(study_track(params, args.command, args.run), args)


def trained_model(params: Params, spec, device, params_file: str = "params.yaml"):
    """(trained model in eval mode, final.json, the corpus data) of a finished run of `params`
    (train.out_dir/<spec.run_id>); a missing or mismatched run is one line naming the command."""
    from ..analysis.analyze_gpa import load_models
    from ..train import load_data

    data = load_data(params.data.out_dir, params.model.context)
    _, model, final = load_models(params, spec, data, device, params_file)
    return model, final, data
