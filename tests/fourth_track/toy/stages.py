"""The toy track's stages and the only owner of where its files live:

    prepare_toy -> train_toy@<row>-s<seed>

    <toy.data_dir>/tokens.npy     the token stream (kernattn prepare-toy)
    <toy.out_dir>/<run>/          the engine's run folder (final.json last)
"""

from __future__ import annotations

from pathlib import Path

from ...config import Params, RunSpec, runs_of
from ...config.rows import find_in
from ...stage import RunFolders, Stage, narrowed_section

NAME = "toy"
SECTIONS = MODEL_SECTIONS = REPORT_SECTIONS = ("toy",)
DATA = "tokens.npy"


def runs(p: Params) -> list[RunSpec]:
    return runs_of(p.toy.rows, p.toy.seeds)


def find_toy_run(p: Params, run_id: str) -> RunSpec:
    return find_in(runs(p), run_id, f"{p.path} (toy.rows of scale {p.scale!r})", "toy run")


def data_output(p: Params) -> str:
    return str(Path(p.toy.data_dir) / DATA)


RUNS = RunFolders("toy")
runs_root, run_dir, final_output = RUNS.root, RUNS.run_dir, RUNS.final_output


def run_roots(p: Params) -> list[Path]:
    return [runs_root(p)]


def report_inputs(p: Params) -> list[str]:
    return [final_output(p, r.run_id) for r in runs(p)]


def stages(p: Params) -> list[Stage]:
    specs, data = runs(p), data_output(p)

    def narrow(run_id: str) -> dict:
        return narrowed_section(p, "toy", specs, run_id)
    return [
        Stage("prepare_toy", ("toy",), ("tracks/toy",), lambda _: [data]),
        Stage("train_toy", ("toy",), ("",), lambda r: [final_output(p, r)], inputs=lambda _: [data],
              dvc_outs=lambda r: [str(run_dir(p, r))], runs=tuple(r.run_id for r in specs),
              extra="--stale archive", persist=True, narrow=narrow, metric=True),
    ]
