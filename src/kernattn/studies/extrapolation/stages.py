"""Length extrapolation's stages: where its files live and its part of the DAG (no torch: the
stage table imports this).

    train@<run> (char)    -> extrapolate_char -> results/<scale>/extrapolation/char.csv -+
    train_lm@<run> (LM)   -> extrapolate_lm   -> results/<scale>/extrapolation/lm.csv   -+-> report

Every trained run of the track is scored, without retraining, at each of
studies.extrapolation.factors times its training context on the same validation text
(extrapolate.py). Unlike the other studies these stages are in the main DAG (`snakemake
--cores all`): they train nothing and take seconds per track at tiny scale, and
the report's extrapolation part reads their CSVs. Their folder sits beside studies.out_dir
(results/<scale>/extrapolation/ by default), not in it: the studies' outputs are never the
report's inputs, these are.
"""

from __future__ import annotations

from pathlib import Path

from ...config import Params
from ...stage import Stage
from ...tracks.char import stages as char
from ...tracks.lm import stages as lm
from ..common import root

TRACKS = ("char", "lm")
COMMAND = {"char": "extrapolate-char", "lm": "extrapolate-lm"}
REPORT_SECTIONS = ()  # the page reads only the tables below


def out_dir(p: Params) -> Path:
    return root(p).parent / "extrapolation"


def output(p: Params, track: str) -> str:
    """The track's table: one line per run and length (extrapolate.COLUMNS)."""
    return str(out_dir(p) / f"{track}.csv")


def outputs(p: Params) -> list[str]:
    return [output(p, t) for t in TRACKS]


def run_ids(p: Params, track: str) -> list[str]:
    return [r.run_id for r in (char.runs(p) if track == "char" else lm.runs(p))]


def stages(p: Params) -> list[Stage]:
    """One stage per track; each reads every finished run of its track (its final.json is
    written last, after the weights) and the validation split."""
    char_finals = [char.final_output(p, r) for r in run_ids(p, "char")]
    lm_finals = [lm.final_output(p, r) for r in run_ids(p, "lm")]
    return [
        Stage("extrapolate_char", ("model", "train", "matrix", "studies"), ("",), lambda _: [output(p, "char")],
              inputs=lambda _: [*char.array_inputs(p), *char_finals]),
        Stage("extrapolate_lm", ("lm", "studies"), ("",), lambda _: [output(p, "lm")],
              inputs=lambda _: [*lm.data_outputs(p), *lm_finals]),
    ]


def report_inputs(p: Params) -> list[str]:
    """The page's extrapolation part reads both tables: they are the report's inputs."""
    return outputs(p)


def run_roots(p: Params) -> list:
    """None: the study trains nothing (it scores the tracks' runs)."""
    return []


def dvc_plots(p: Params) -> list[dict]:
    """dvc.yaml's plots of the study: each table, loss against the evaluated length, every run."""
    return [{path: {"x": "length", "y": "loss", "template": "scatter",
                    "title": f"Length extrapolation ({Path(path).stem}): loss against length, every run"}}
            for path in outputs(p)]
