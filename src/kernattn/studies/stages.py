"""The studies' stages (issue 17), outside the main DAG (the Snakefile's `studies` target):

    prepare -> prepare_wrap -> train_wrap@<run> -> wrap_study (with train@<row>-s<seed>, analyze_corpus)
    prepare / prepare_lm / prepare_vision -> train_gka_init@<run> (char, LM and vision GKA rows) -> gka_init_study
    train@<gpa run> -> prune@<gpa run> -> prune_study

The studies' own files are named in kernattn.studies; a track's files only by its stages module.
"""

from __future__ import annotations

import dataclasses

from ..config import Params
from ..stage import Stage, narrowed_section
from ..tracks import track_module
from ..tracks.char import stages as char
from . import (extrapolation, gka_run_dir, gka_runs, prune_dir, prune_output, prune_runs, root, summary_path,
               wrap_corpus_summaries, wrap_data_dir, wrap_data_outputs, wrap_original_runs, wrap_run_dir, wrap_runs)

TARGETS = ("wrap_study", "gka_init_study", "prune_study")  # what `snakemake studies` asks for
REPORT_SECTIONS = ()  # the page's study parts read only the files below
INIT_SECTIONS = ("model", "train", "matrix", "lm", "vision", "studies")  # what a GKA-init run may read


def _final(folder, run_id: str) -> str:
    return f"{folder}/{run_id}/final.json"


def _wrap_stages(p: Params) -> list[Stage]:
    runs = wrap_runs(p)
    finals = [_final(wrap_run_dir(p), r) for r in runs]
    # every counterfactual's arrays (a run's path is a pattern of its id: it cannot pick its corpus's)
    corpus_data = [str(wrap_data_dir(p, c) / f) for c in p.studies.wrap.corpora for f in char.ARRAYS]

    def narrow(r: str) -> dict:  # the run's own row and corpus (adding a row reruns no other run)
        corpus, spec = runs[r]
        return {"matrix": char.run_spec(p, f"{spec.row}-s{spec.seed}"),
                "studies": {"corpus": corpus, "width": p.studies.wrap.width}}

    return [
        Stage("prepare_wrap", ("data", "analysis", "studies"), ("studies", "tracks/char"),
              lambda _: [*wrap_data_outputs(p), *wrap_corpus_summaries(p)], inputs=lambda _: char.data_outputs(p),
              dvc_outs=lambda _: [str(root(p) / "wrap" / "data"), str(root(p) / "wrap" / "analysis")]),
        Stage("train_wrap", ("model", "train", "matrix", "studies"), ("",), lambda r: [_final(wrap_run_dir(p), r)],
              inputs=lambda _: corpus_data, dvc_outs=lambda r: [str(wrap_run_dir(p) / r)],
              runs=tuple(runs), extra="--stale archive", persist=True, threads=p.train.threads or 4,
              narrow=narrow),
        Stage("wrap_study", ("model", "matrix", "analysis", "studies"), ("",),
              lambda _: [str(summary_path(p, "wrap")), str(root(p) / "wrap" / "bumps.csv")],
              inputs=lambda _: [*char.array_inputs(p), char.corpus_analysis_output(p), *wrap_corpus_summaries(p),
                                *finals, *(char.final_output(p, r) for r in wrap_original_runs(p))]),
    ]


def _gka_init_stages(p: Params) -> list[Stage]:
    """GKA's bandwidth at initialisation: a GKA row of each track (char, LM, vision) per init
    and seed. A run reads only its own track's sections, narrowed to its row and seed (the
    others are empty for it: changing the LM does not retrain a char run)."""
    runs = gka_runs(p)
    tracks = {t: track_module(t, "stages") for t in ("char", "lm", "vision")}
    track_data = {"char": char.array_inputs(p), "lm": tracks["lm"].data_outputs(p),
                  "vision": [tracks["vision"].data_output(p)]}

    def narrow(r: str) -> dict:
        run = runs[r]
        base_id = f"{run.spec.row}-s{run.spec.seed}"
        view = {"matrix": dataclasses.asdict(run.spec)} if run.track == "char" else narrowed_section(
            p, run.track, tracks[run.track].runs(p), base_id)
        own = {s: view.get(s, p.raw[s]) for s in tracks[run.track].SECTIONS if s in INIT_SECTIONS}
        return {s: own.get(s, {}) for s in INIT_SECTIONS[:-1]} | {"studies": {"init": run.label}}

    finals = [_final(gka_run_dir(p), r) for r in runs]
    return [
        Stage("train_gka_init", INIT_SECTIONS, ("",), lambda r: [_final(gka_run_dir(p), r)],
              inputs=lambda r: track_data[runs[r].track] if r in runs else [f for d in track_data.values() for f in d],
              dvc_outs=lambda r: [str(gka_run_dir(p) / r)], runs=tuple(runs), extra="--stale archive",
              persist=True, threads=p.train.threads or 4, narrow=narrow),
        Stage("gka_init_study", INIT_SECTIONS, ("",), lambda _: [str(summary_path(p, "gka_init"))],
              inputs=lambda _: [*dict.fromkeys(f for r in runs.values() for f in track_data[r.track]), *finals]),
    ]


def stages(p: Params) -> list[Stage]:
    """Length extrapolation (in the main DAG: the report reads it), then every other study's
    stages (not inputs of the report, not in `all`: the Snakefile's `studies` target)."""
    prune = tuple(prune_runs(p))
    return [
        *extrapolation.stages(p),
        *_wrap_stages(p),
        *_gka_init_stages(p),
        Stage("prune", ("model", "train", "matrix", "analysis", "studies"), ("",),
              lambda r: [prune_output(p, r)], inputs=lambda r: [*char.array_inputs(p), char.final_output(p, r)],
              dvc_outs=lambda r: [str(prune_dir(p, r))], runs=prune, persist=True,
              threads=p.train.threads or 4, narrow=lambda r: {"matrix": char.run_spec(p, r)}),
        Stage("prune_study", ("analysis", "studies"), ("studies",),
              lambda _: [str(summary_path(p, "prune")),
                         *(str(root(p) / "prune" / f) for f in ("prune.csv", "prune_rows.csv"))],
              inputs=lambda _: [prune_output(p, r) for r in prune]),
    ]


def report_inputs(p: Params) -> list[str]:
    """What the page needs of the studies before it renders: the extrapolation tables (the other
    studies are read where they ran; a missing one is a warning naming its command)."""
    return extrapolation.outputs(p)


def run_roots(p: Params) -> list:
    """The folders the studies' training runs lie in (engine run folders, one per run id)."""
    return [wrap_run_dir(p), gka_run_dir(p), *(prune_dir(p, r) for r in prune_runs(p))]
