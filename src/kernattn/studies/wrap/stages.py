"""The line-wrap study's files and stages (no torch: the stage table imports this).

    prepare -> prepare_wrap -> train_wrap@<row>-<corpus>-s<seed> -+
    train@<row>-s<seed> (main DAG), analyze_corpus (main DAG) ---+-> wrap_study

Under <studies.out_dir>/wrap/:
    data/<corpus>/            the counterfactual corpus (train.npy, val.npy, vocab.json, meta.json)
    analysis/<corpus>/corpus/ its newline, line and paragraph histograms (kernattn analyze-corpus)
    runs/<run>/               a GPA run on it (the engine's run folder)
    summary.json, bumps.csv   bumps per corpus and seed, newline peaks, the verdict
Run ids: <row>-<corpus>-s<seed>, the matrix run <row>-s<seed> on another corpus.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ...config import Params, RunSpec, find_run
from ...config.studies import row_seeds, wrap_rows
from ...stage import Stage
from ...tracks.char import stages as char
from ..common import SUMMARY, final, root, summary_path

REPORT_SECTIONS = ()  # the page's part reads only summary.json (where it exists: not an input)
STUDY = "wrap"


def wrap_data_dir(p: Params, corpus: str) -> Path:
    return root(p) / STUDY / "data" / corpus


def wrap_data_outputs(p: Params) -> list[str]:
    return [str(wrap_data_dir(p, c) / f) for c in p.studies.wrap.corpora for f in char.DATA_FILES]


def wrap_analysis_dir(p: Params, corpus: str) -> Path:
    """analysis.out_dir of a counterfactual: its corpus analysis lands in <this>/corpus/."""
    return root(p) / STUDY / "analysis" / corpus


def wrap_corpus_summaries(p: Params) -> list[str]:
    return [str(wrap_analysis_dir(p, c) / "corpus" / SUMMARY) for c in p.studies.wrap.corpora]


def wrap_runs(p: Params) -> dict[str, tuple[str, RunSpec]]:
    """{run id: (corpus, the matrix run it repeats on that corpus)}."""
    out = {}
    for corpus in p.studies.wrap.corpora:
        for row in wrap_rows(p):
            for seed in row_seeds(p, row):
                spec = find_run(p, f"{row}-s{seed}")
                run_id = f"{row}-{corpus}-s{seed}"
                out[run_id] = (corpus, dataclasses.replace(spec, run_id=run_id, label=f"{spec.label}, {corpus}"))
    return out


def wrap_original_runs(p: Params) -> list[str]:
    """The main DAG's runs the wrap study compares with (not retrained)."""
    return [f"{row}-s{seed}" for row in wrap_rows(p) for seed in row_seeds(p, row)]


def wrap_run_dir(p: Params) -> Path:
    return root(p) / STUDY / "runs"


def stages(p: Params) -> list[Stage]:
    runs = wrap_runs(p)
    finals = [final(wrap_run_dir(p), r) for r in runs]
    # every counterfactual's arrays (a run's path is a pattern of its id: it cannot pick its corpus's)
    corpus_data = [str(wrap_data_dir(p, c) / f) for c in p.studies.wrap.corpora for f in char.ARRAYS]

    def narrow(r: str) -> dict:  # the run's own row and corpus (adding a row reruns no other run)
        corpus, spec = runs[r]
        return {"matrix": char.run_spec(p, f"{spec.row}-s{spec.seed}"),
                "studies": {"corpus": corpus, "width": p.studies.wrap.width}}

    return [
        Stage("prepare_wrap", ("data", "analysis", "studies"), ("studies/wrap", "studies/common.py", "tracks/char"),
              lambda _: [*wrap_data_outputs(p), *wrap_corpus_summaries(p)], inputs=lambda _: char.data_outputs(p),
              dvc_outs=lambda _: [str(root(p) / STUDY / "data"), str(root(p) / STUDY / "analysis")]),
        Stage("train_wrap", ("model", "train", "matrix", "studies"), ("",), lambda r: [final(wrap_run_dir(p), r)],
              inputs=lambda _: corpus_data, dvc_outs=lambda r: [str(wrap_run_dir(p) / r)],
              runs=tuple(runs), extra="--stale archive", persist=True, threads=p.train.threads or 4,
              narrow=narrow),
        Stage("wrap_study", ("model", "matrix", "analysis", "studies"), ("",),
              lambda _: [str(summary_path(p, STUDY)), str(root(p) / STUDY / "bumps.csv")],
              inputs=lambda _: [*char.array_inputs(p), char.corpus_analysis_output(p), *wrap_corpus_summaries(p),
                                *finals, *(char.final_output(p, r) for r in wrap_original_runs(p))]),
    ]


def report_inputs(p: Params) -> list[str]:
    """None: the study is outside the main DAG; the page reads its summary where it ran (a
    missing one is a section naming its command)."""
    return []


def run_roots(p: Params) -> list:
    return [wrap_run_dir(p)]
