"""The GKA-init study's runs: a GKA row of the char, LM or vision track with options.init_sigma
set, trained by that track (kernattn.tracks.char.track.CharTrack, lm.track.LMTrack,
vision.track.VisionTrack) into <studies.out_dir>/gka_init/runs/.

    kernattn train-gka-init --params P [--scale S] --run [<track>_]<row>-init_<init>-s<seed> [--fresh] [--stale archive]

Everything else is the track's own: model, schedule, seed, batch order (the same batches per
seed as the original runs), resume, SIGTERM, MLflow (experiment <the track's experiment>-studies).
GKA runs also log, on every val line, each head's bandwidth: `sigma_L<layer>H<head>` (from 1).
"""

from __future__ import annotations

import argparse
import dataclasses
from types import SimpleNamespace

from ...config import Params, params_from_args
from ...engine.options import run_track
from ...tracks.char.track import CharTrack
from ..common import add_run_arguments, study_params, study_run
from .stages import gka_run_dir, gka_runs


class SigmaLog:
    """A track mixin: each GKA head's bandwidth on the val lines, `sigma_L<layer>H<head>`."""

    def line_fields(self, split: str, step: int, values: dict) -> dict:
        fields = super().line_fields(split, step, values)
        if split == "val":
            fields.update(sigma_fields(self.model))
        return fields


def sigma_fields(model) -> dict[str, float]:
    from ...attention.gka_readings import sigmas

    return {f"sigma_L{layer}H{head}": sigma
            for layer, heads in enumerate(sigmas(model), 1) for head, sigma in enumerate(heads, 1)}


class GKAInitTrack(SigmaLog, CharTrack):
    """The char track, logging each GKA head's bandwidth on its val lines."""


def gka_init_track(params: Params, run):
    """The track of one GKA-init run (a stages.InitRun) with its folder in the study's, and
    its MLflow experiment the track's own + '-studies'."""
    from ...engine.mlrun import experiment_name

    out = str(gka_run_dir(params))
    if run.track == "char":
        track = GKAInitTrack(study_params(params, None, out), run.spec)
    elif run.track == "lm":
        from ...tracks.lm.track import LMTrack

        track = type("GKAInitLMTrack", (SigmaLog, LMTrack), {})(
            dataclasses.replace(params, lm=dataclasses.replace(params.lm, out_dir=out)), run.spec)
    else:
        from ...tracks.vision.track import VisionTrack

        track = type("GKAInitVisionTrack", (SigmaLog, VisionTrack), {})(
            dataclasses.replace(params, vision=dataclasses.replace(params.vision, out_dir=out)), run.spec)
    if run.track != "char":
        name = experiment_name(track.experiment_section, track.name, params.scale)
        track.experiment_section = SimpleNamespace(experiment=f"{name}-studies")
    return track


def study_track(params: Params, run_id: str):
    """The track of one GKA-init run; an unknown run id is one line listing the study's runs."""
    return gka_init_track(params, study_run(params, gka_runs(params), "train-gka-init", run_id))


add_arguments = add_run_arguments


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    return run_track(study_track(params, args.run), args)
