"""Training runs of the studies: the char track (kernattn.tracks.char.track.CharTrack) on the engine, with
another corpus or another attention option, into the study's folder.

    kernattn train-wrap     --params P [--scale S] --run <row>-<corpus>-s<seed> [--fresh] [--stale archive]
    kernattn train-gka-init --params P [--scale S] --run [<track>_]<row>-init_<init>-s<seed> [--fresh] [--stale archive]

A line-wrap run is the matrix run <row>-s<seed> with data.out_dir moved to the counterfactual
corpus (<studies.out_dir>/wrap/data/<corpus>/, same vocabulary) and train.out_dir to
<studies.out_dir>/wrap/runs/; a GKA-init run is a GKA row of the char, LM or vision track with
options.init_sigma set, in <studies.out_dir>/gka_init/runs/, trained by that track
(kernattn.tracks.char.track.CharTrack, lm.train.LMTrack, vision.train.VisionTrack). Everything else is the
track's own: model, schedule, seed, batch order (the same batches per seed as the original
runs), resume, SIGTERM, MLflow (experiment <the track's experiment>-studies). GKA runs also log,
on every val line, each head's bandwidth: `sigma_L<layer>H<head>` (from 1).
"""

from __future__ import annotations

import argparse
import dataclasses
from types import SimpleNamespace

from ..config import Params, params_from_args
from ..engine.options import add_run_options, run_track
from ..errors import UsageError
from ..tracks.char.track import CharTrack
from . import gka_run_dir, gka_runs, wrap_data_dir, wrap_run_dir, wrap_runs



def study_params(params: Params, data_dir: str | None, out_dir: str) -> Params:
    """`params` training into `out_dir` (and reading `data_dir` when given), tracked in the
    studies' MLflow experiment."""
    data = params.data if data_dir is None else dataclasses.replace(params.data, out_dir=str(data_dir))
    return dataclasses.replace(
        params, data=data, train=dataclasses.replace(params.train, out_dir=str(out_dir)),
        tracking=dataclasses.replace(params.tracking, experiment=f"{params.tracking.experiment}-studies"))


class SigmaLog:
    """A track mixin: each GKA head's bandwidth on the val lines, `sigma_L<layer>H<head>`."""

    def line_fields(self, split: str, step: int, values: dict) -> dict:
        fields = super().line_fields(split, step, values)
        if split == "val":
            fields.update(sigma_fields(self.model))
        return fields


def sigma_fields(model) -> dict[str, float]:
    from ..attention.gka_readings import sigmas

    return {f"sigma_L{layer}H{head}": sigma
            for layer, heads in enumerate(sigmas(model), 1) for head, sigma in enumerate(heads, 1)}


class GKAInitTrack(SigmaLog, CharTrack):
    """The char track, logging each GKA head's bandwidth on its val lines."""


def gka_init_track(params: Params, run):
    """The track of one GKA-init run (a studies.InitRun) with its folder in the study's, and
    its MLflow experiment the track's own + '-studies'."""
    from ..engine.mlrun import experiment_name

    out = str(gka_run_dir(params))
    if run.track == "char":
        track = GKAInitTrack(study_params(params, None, out), run.spec)
    elif run.track == "lm":
        from ..tracks.lm.track import LMTrack

        track = type("GKAInitLMTrack", (SigmaLog, LMTrack), {})(
            dataclasses.replace(params, lm=dataclasses.replace(params.lm, out_dir=out)), run.spec)
    else:
        from ..tracks.vision.track import VisionTrack

        track = type("GKAInitVisionTrack", (SigmaLog, VisionTrack), {})(
            dataclasses.replace(params, vision=dataclasses.replace(params.vision, out_dir=out)), run.spec)
    if run.track != "char":
        name = experiment_name(track.experiment_section, track.name, params.scale)
        track.experiment_section = SimpleNamespace(experiment=f"{name}-studies")
    return track


def study_track(params: Params, command: str, run_id: str):
    """The track of one study run (`command`: train-wrap or train-gka-init)."""
    runs = wrap_runs(params) if command == "train-wrap" else gka_runs(params)
    if run_id not in runs:
        raise UsageError(f"{params.path}: no run {run_id!r} in the {command} study of scale {params.scale!r}; "
                         f"runs: {', '.join(runs) or 'none'}")
    if command == "train-wrap":
        corpus, spec = runs[run_id]
        return CharTrack(study_params(params, str(wrap_data_dir(params, corpus)), str(wrap_run_dir(params))), spec)
    return gka_init_track(params, runs[run_id])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="a run of the study (see the stage table)")
    add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    return run_track(study_track(params, args.command, args.run), args)


def trained_model(params: Params, spec, device, params_file: str = "params.yaml"):
    """(trained model in eval mode, final.json, the corpus data) of a finished run of `params`
    (train.out_dir/<spec.run_id>); a missing or mismatched run is one line naming the command."""
    from ..tracks.char.analysis.analyze_gpa import load_models
    from ..tracks.char.data import load_data
    from ..tracks.char.stages import data_dir

    data = load_data(data_dir(params), params.model.context)
    _, model, final = load_models(params, spec, data, device, params_file)
    return model, final, data
