"""params.yaml as one typed tree: loading, the chosen scale, overrides and validation.

    params = load_params("params.yaml")            # scale from the file (or KERNATTN_SCALE)
    params = load_params("params.yaml", "micro", {"train": {"lr": 0.5}})   # with overrides
    params = params_from_args(args)   # a command's --params, --scale and --overrides FILE
    params.train.max_steps, params.lm.depth, params.vision.img_size, ...
    for run in run_matrix(params): run.run_id, run.row, run.seed, run.variant, run.options
    lm.rows, vision.rows, matrix.rows: one row schema (config.rows); runs_of(rows, seeds) their runs

The file holds the defaults (paper scale), a `scale` key naming one entry of `scales`, and
`scales: {name: overrides}`; the overrides are deep-merged over the defaults. Every key is
checked against the dataclasses of schema.py's rules (char.py: the char GPT's sections;
common.py: RunSettings, the runtime fields train, lm and vision inherit, and the sections no
track owns; lm.py; vision.py), and every cross-key check runs on every load: an unknown key, a
wrong type or a value out of range fails with one line naming the file (or the override's
source), the key and what is allowed (`ParamsError`). Overrides (Snakemake's --configfile
and --config, a command's --overrides FILE) take everything the file takes: loader.py says in
what order they apply.

Imports: errors and schema only (attention, for the row options, when loading; kernattn.units,
which imports nothing, to find the sections units keep in their own folders: loader.unit_sections);
nothing of the tracks, the DAG or the CLI.
"""

from __future__ import annotations

from ..errors import ParamsError
from .char import AnalysisParams, DataParams, MatrixParams, ModelParams, Row, TrainParams
from .common import BENCH_FAMILIES, BenchParams, ReportParams, RunSettings, TrackingParams
from .lm import LMParams
from .loader import SCALE_ENV, SECTIONS, Params, load_params, nest_dotted, overrides_sources, params_from_args
from .rows import Compute, RunSpec, check_rows, resolve_attention, runs_of
from .rows import find_in
from .schema import fingerprinted, not_fingerprinted
from .studies import StudiesParams
from .vision import VisionParams

__all__ = [
    "BENCH_FAMILIES", "AnalysisParams", "Compute", "BenchParams", "DataParams", "LMParams", "MatrixParams",
    "ModelParams", "Params", "ParamsError", "ReportParams", "Row", "RunSettings", "RunSpec", "SCALE_ENV",
    "SECTIONS", "StudiesParams", "TrackingParams", "TrainParams", "VisionParams", "check_rows", "find_run", "resolve_attention", "runs_of", "fingerprinted", "load_params",
    "nest_dotted", "not_fingerprinted", "overrides_sources", "params_from_args", "run_matrix",
]


def run_matrix(params: Params) -> list[RunSpec]:
    """Every (row, seed) the chosen scale trains, in a stable order; run_id = '<row>-s<seed>'."""
    return runs_of(params.matrix.rows, params.matrix.seeds, params.matrix.only)


def find_run(params: Params, run_id: str) -> RunSpec:
    return find_in(run_matrix(params), run_id, f"{params.path} (matrix of scale {params.scale!r})")
