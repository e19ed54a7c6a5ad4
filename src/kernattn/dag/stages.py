"""The stage table: every stage of every track, from params (the DAG as data).

    prepare -> train@<run> -> analyze_gpa@<gpa run>;  prepare -> analyze_corpus
    prepare_vision -> train_vision@<run> -> analyze_vision@<run>;  count_vision
    prepare_lm -> train_lm@<run> -> eval_lm@<run>   (a matched run needs no other run: its
                                                      steps come from FLOPs counted on the meta device)
    bench;  all of them -> report
    the studies (issue 17; kernattn.studies), outside `all` (the Snakefile's `studies` target):
    prepare -> prepare_wrap -> train_wrap@<run> -> wrap_study (with train@<row>-s<seed>, analyze_corpus)
    prepare / prepare_lm / prepare_vision -> train_gka_init@<run> (char, LM and vision GKA rows) -> gka_init_study
    train@<gpa run> -> prune@<gpa run> -> prune_study

The Snakefile's rules (rules/*.smk) and dvc.yaml (dag.dvc) both read this table, so the
two DAGs have the same stages, files and params sections. Training stages do not read
`tracking`: where a run is mirrored does not change what it computes, so a new tracking URI
must not retrain (`kernattn sync-mlflow` uploads finished runs to the new store).
"""

from __future__ import annotations

import dataclasses

from ..tracks.char import analysis
from .. import studies
from ..config import Params, find_run, run_matrix
from ..config.rows import chain
from ..tracks.lm import stages as lm_paths
from ..tracks.lm.stages import lm_runs
from ..tracks.vision import stages as vision_paths
from .stage import Stage

DATA_FILES = ("train.npy", "val.npy", "vocab.json", "meta.json")


# ----------------------------------------------------------------------------- char paths
def data_outputs(params: Params) -> list[str]:
    return [f"{params.data.out_dir}/{name}" for name in DATA_FILES]


def run_output(params: Params, run_id: str) -> str:
    return f"{params.train.out_dir}/{run_id}/final.json"


def report_output(params: Params) -> str:
    return f"{params.report.out_dir}/index.html"


def bench_output(params: Params) -> str:
    """The whole-model benchmark's CSV (kernattn bench): once per scale."""
    return f"{params.bench.out_dir}/models.csv"


def corpus_analysis_output(params: Params) -> str:
    """The corpus newline histogram (kernattn analyze-corpus): once per scale."""
    return str(analysis.corpus_dir(params) / analysis.SUMMARY)


def gpa_run_ids(params: Params) -> list[str]:
    """The runs kernattn analyze-gpa reads: every GPA run of the matrix."""
    return [r.run_id for r in analysis.gpa_runs(params)]


def analysis_output(params: Params, run_id: str) -> str:
    return str(analysis.run_dir(params, run_id) / analysis.SUMMARY)


def run_spec(params: Params, run_id: str) -> dict:
    """One run's row and seed: the part of `matrix` a per-run stage reads (so that adding a
    row to the matrix does not rerun the other runs)."""
    return dataclasses.asdict(find_run(params, run_id))


def track_run_view(p: Params, section: str, runs: list, run_id: str) -> dict:
    """The `section` (lm or vision) as one run reads it: its rows cut to the run's row and the
    rows its compute refers to, its seeds to the run's seed; adding a row or a seed then
    reruns no other run (Snakemake's params trigger)."""
    run = next(r for r in runs if r.run_id == run_id)
    names = {r.name for r in chain(getattr(p, section).rows, run.row)}
    raw = p.raw[section]
    return {section: {**raw, "rows": [r for r in raw["rows"] if r["name"] in names], "seeds": [run.seed]}}


# ----------------------------------------------------------------------------- the table
def char_stages(p: Params) -> list[Stage]:
    data = data_outputs(p)
    runs = tuple(r.run_id for r in run_matrix(p))
    return [
        Stage("prepare", ("data",), ("tracks/char/corpus.py", "tracks/char/data.py", "fetch.py"), lambda _: data),
        Stage("train", ("model", "train", "matrix"), ("",), lambda r: [run_output(p, r)],
              inputs=lambda _: data[:3], dvc_outs=lambda r: [f"{p.train.out_dir}/{r}"], runs=runs,
              extra="--stale archive", persist=True, threads=p.train.threads or 4,
              narrow=lambda r: {"matrix": run_spec(p, r)}),
        Stage("analyze_corpus", ("data", "analysis"), ("tracks/char/analysis",), lambda _: [corpus_analysis_output(p)],
              inputs=lambda _: data[:3], dvc_outs=lambda _: [str(analysis.corpus_dir(p))]),
        Stage("analyze_gpa", ("model", "train", "matrix", "analysis"), ("",), lambda r: [analysis_output(p, r)],
              inputs=lambda r: [*data[:3], run_output(p, r)], dvc_outs=lambda r: [str(analysis.run_dir(p, r))],
              runs=tuple(gpa_run_ids(p)), threads=p.train.threads or 4,
              narrow=lambda r: {"matrix": run_spec(p, r)}),
    ]


def vision_stages(p: Params) -> list[Stage]:
    vp = p.vision
    data = [vision_paths.data_output(vp)]
    runs = vision_paths.runs(vp)

    def narrow(run_id: str) -> dict:
        return track_run_view(p, "vision", runs, run_id)
    return [
        Stage("prepare_vision", ("vision",), ("tracks/vision/data.py", "fetch.py"), lambda _: data,
              dvc_outs=lambda _: [vp.data_dir]),
        Stage("count_vision", ("vision",), ("tracks/vision", "attention"), lambda _: [vision_paths.counts_output(vp)],
              dvc_outs=lambda _: [vp.counts_dir]),
        Stage("train_vision", ("vision",), ("",), lambda r: [vision_paths.run_output(vp, r)],
              inputs=lambda _: data, dvc_outs=lambda r: [f"{vp.out_dir}/{r}"],
              runs=tuple(vision_paths.run_ids(vp)), extra="--stale archive", persist=True, threads=vp.threads or 4,
              narrow=narrow),
        Stage("analyze_vision", ("vision",), ("",), lambda r: [vision_paths.analysis_output(vp, r)],
              inputs=lambda r: [*data, vision_paths.run_output(vp, r)],
              dvc_outs=lambda r: [f"{vp.analysis_dir}/{r}"], runs=tuple(vision_paths.viz_runs(vp)),
              threads=vp.threads or 4, narrow=narrow),
    ]


def lm_stages(p: Params) -> list[Stage]:
    data = lm_paths.data_outputs(p)
    specs = lm_runs(p.lm)
    runs = tuple(r.run_id for r in specs)

    def narrow(run_id: str) -> dict:  # a matched run reads its reference row, never its outputs
        return track_run_view(p, "lm", specs, run_id)
    return [
        Stage("prepare_lm", ("lm",), ("tracks/lm", "fetch.py"), lambda _: data),
        Stage("train_lm", ("lm",), ("",), lambda r: [lm_paths.final_output(p, r)], inputs=lambda _: data,
              dvc_outs=lambda r: [str(lm_paths.run_dir(p.lm, r))], runs=runs, extra="--stale archive",
              persist=True, threads=p.lm.threads or 4, narrow=narrow),
        Stage("eval_lm", ("lm",), ("",), lambda r: [lm_paths.eval_output(p, r)],
              inputs=lambda r: [*data, lm_paths.final_output(p, r)], runs=runs, threads=p.lm.threads or 4,
              narrow=narrow),
    ]


def shared_stages(p: Params, before: list[Stage]) -> list[Stage]:
    """The benchmark (it builds every track's models: it reads their sections and code) and
    the report (every other stage's outputs but the token arrays and the corpus's arrays)."""
    bench = Stage("bench", ("bench", "model", "matrix", "vision", "lm"),
                  ("bench", "attention", "tracks"), lambda _: [bench_output(p)],
                  dvc_outs=lambda _: [p.bench.out_dir], threads="all")
    # the report reads the corpus's meta.json, not the training arrays
    report_inputs = [f for s in [*before, bench] if s.name not in ("prepare", "prepare_lm")
                     for r in (s.runs or [None]) for f in s.outputs(r)] + [data_outputs(p)[3]]
    report = Stage("report", ("report", "matrix", "analysis", "bench", "vision", "lm"), ("report", "tracks"),
                   lambda _: [report_output(p)], inputs=lambda _: report_inputs,
                   dvc_outs=lambda _: [p.report.out_dir])
    return [bench, report]


def _final(folder, run_id: str) -> str:
    return f"{folder}/{run_id}/final.json"


def _wrap_stages(p: Params, data: list[str]) -> list[Stage]:
    wrap_runs = studies.wrap_runs(p)
    finals = [_final(studies.wrap_run_dir(p), r) for r in wrap_runs]
    # every counterfactual's arrays (a run's path is a pattern of its id: it cannot pick its corpus's)
    corpus_data = [str(studies.wrap_data_dir(p, c) / f) for c in p.studies.wrap.corpora for f in DATA_FILES[:3]]

    def narrow(r: str) -> dict:  # the run's own row and corpus (adding a row reruns no other run)
        corpus, spec = wrap_runs[r]
        return {"matrix": run_spec(p, f"{spec.row}-s{spec.seed}"),
                "studies": {"corpus": corpus, "width": p.studies.wrap.width}}

    return [
        Stage("prepare_wrap", ("data", "analysis", "studies"), ("studies", "tracks/char"),
              lambda _: [*studies.wrap_data_outputs(p), *studies.wrap_corpus_summaries(p)], inputs=lambda _: data,
              dvc_outs=lambda _: [str(studies.root(p) / "wrap" / "data"), str(studies.root(p) / "wrap" / "analysis")]),
        Stage("train_wrap", ("model", "train", "matrix", "studies"), ("",), lambda r: [_final(studies.wrap_run_dir(p), r)],
              inputs=lambda _: corpus_data, dvc_outs=lambda r: [str(studies.wrap_run_dir(p) / r)],
              runs=tuple(wrap_runs), extra="--stale archive", persist=True, threads=p.train.threads or 4,
              narrow=narrow),
        Stage("wrap_study", ("model", "matrix", "analysis", "studies"), ("",),
              lambda _: [str(studies.summary_path(p, "wrap")), str(studies.root(p) / "wrap" / "bumps.csv")],
              inputs=lambda _: [*data[:3], corpus_analysis_output(p), *studies.wrap_corpus_summaries(p), *finals,
                                *(run_output(p, r) for r in studies.wrap_original_runs(p))]),
    ]


INIT_SECTIONS = ("model", "train", "matrix", "lm", "vision", "studies")  # what a GKA-init run may read


def _gka_init_stages(p: Params, data: list[str]) -> list[Stage]:
    """GKA's bandwidth at initialisation: a GKA row of each track (char, LM, vision) per init
    and seed. A run reads only its own track's sections, narrowed to its row and seed (the
    others are empty for it: changing the LM does not retrain a char run)."""
    runs = studies.gka_runs(p)
    track_data = {"char": data[:3], "lm": lm_paths.data_outputs(p), "vision": [vision_paths.data_output(p.vision)]}
    track_sections = {"char": ("model", "train", "matrix"), "lm": ("lm",), "vision": ("vision",)}

    def narrow(r: str) -> dict:
        run = runs[r]
        view = {"matrix": dataclasses.asdict(run.spec)} if run.track == "char" else track_run_view(
            p, run.track, lm_runs(p.lm) if run.track == "lm" else vision_paths.runs(p.vision),
            f"{run.spec.row}-s{run.spec.seed}")
        own = {s: view.get(s, p.raw[s]) for s in track_sections[run.track]}
        return {s: own.get(s, {}) for s in INIT_SECTIONS[:-1]} | {"studies": {"init": run.label}}

    finals = [_final(studies.gka_run_dir(p), r) for r in runs]
    return [
        Stage("train_gka_init", INIT_SECTIONS, ("",), lambda r: [_final(studies.gka_run_dir(p), r)],
              inputs=lambda r: track_data[runs[r].track] if r in runs else [f for d in track_data.values() for f in d],
              dvc_outs=lambda r: [str(studies.gka_run_dir(p) / r)], runs=tuple(runs), extra="--stale archive",
              persist=True, threads=p.train.threads or 4, narrow=narrow),
        Stage("gka_init_study", INIT_SECTIONS, ("",), lambda _: [str(studies.summary_path(p, "gka_init"))],
              inputs=lambda _: [*dict.fromkeys(f for r in runs.values() for f in track_data[r.track]), *finals]),
    ]


def studies_stages(p: Params) -> list[Stage]:
    """The studies of issue 17 (kernattn.studies): not inputs of the report, not in `all`."""
    data = data_outputs(p)
    prune = tuple(studies.prune_runs(p))
    return [
        *_wrap_stages(p, data),
        *_gka_init_stages(p, data),
        Stage("prune", ("model", "train", "matrix", "analysis", "studies"), ("",),
              lambda r: [studies.prune_output(p, r)], inputs=lambda r: [*data[:3], run_output(p, r)],
              dvc_outs=lambda r: [str(studies.prune_dir(p, r))], runs=prune, persist=True,
              threads=p.train.threads or 4, narrow=lambda r: {"matrix": run_spec(p, r)}),
        Stage("prune_study", ("analysis", "studies"), ("studies",),
              lambda _: [str(studies.summary_path(p, "prune")), str(studies.root(p) / "prune" / "prune.csv")],
              inputs=lambda _: [studies.prune_output(p, r) for r in prune]),
    ]


def studies_outputs(stages: dict[str, Stage]) -> list[str]:
    """What the Snakefile's `studies` target asks for: each study's summary."""
    return [f for name in STUDY_TARGETS for f in stages[name].outputs(None)]


STUDY_TARGETS = ("wrap_study", "gka_init_study", "prune_study")


def stage_table(params: Params) -> dict[str, Stage]:
    """Every stage, in an order that runs (upstream first), by name; the studies last."""
    tracks = [*char_stages(params), *vision_stages(params), *lm_stages(params)]
    return {s.name: s for s in [*tracks, *shared_stages(params, tracks), *studies_stages(params)]}
