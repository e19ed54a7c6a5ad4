"""The experiments the papers leave open (issue 17), as pipeline stages: `snakemake --cores all
studies` (or `dvc repro` of their stages), outside the main DAG.

    prepare -> prepare_wrap -> train_wrap@<row>-<corpus>-s<seed> -+
    train@<row>-s<seed> (main DAG), analyze_corpus (main DAG) ---+-> wrap_study
    prepare / prepare_lm / prepare_vision -> train_gka_init@<run> -> gka_init_study
    train@<gpa run> (main DAG) -> prune@<gpa run> -> prune_study

Everything lands under studies.out_dir (results/<scale>/studies/):
    wrap/data/<corpus>/            the counterfactual corpus (train.npy, val.npy, vocab.json, meta.json)
    wrap/analysis/<corpus>/corpus/ its newline, line and paragraph histograms (kernattn analyze-corpus)
    wrap/runs/<run>/               a GPA run on it (the engine's run folder)
    wrap/summary.json              bumps per corpus and seed, newline peaks, the verdict
    gka_init/runs/<run>/           a GKA run per track, init and seed (metrics.jsonl holds sigma per head)
    gka_init/summary.json          final loss per init, sigma over training, mean diagonal weight
    prune/<run>/{pruned,control,random}/  the three fine-tunings of one trained GPA run (engine run folders)
    prune/<run>/summary.json       losses before/after removal and fine-tuning, ablations, costs
    prune/summary.json             every pruned run in one table
Run ids keep the `<row>-s<seed>` form, the row naming the study's variation. The paths and
run ids live here (no torch: the stage table imports this module); the stages in
stages.py, the commands in the modules beside it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..config import Params, RunSpec, find_run
from ..config.rows import runs_of
from ..config.studies import init_label, prune_rows, seeds, wrap_rows
from ..tracks.char import stages as char_stages
from ..tracks.lm.stages import lm_runs
from ..tracks.vision.stages import vision_runs

SUMMARY = "summary.json"
ARMS = ("pruned", "control", "random")  # the weak heads removed; none; as many random other heads removed


def root(p: Params) -> Path:
    return Path(p.studies.out_dir)


def summary_path(p: Params, study: str) -> Path:
    """<studies.out_dir>/<study>/summary.json: what the report reads of each study."""
    return root(p) / study / SUMMARY


# ----------------------------------------------------------------------------- wrap
def wrap_data_dir(p: Params, corpus: str) -> Path:
    return root(p) / "wrap" / "data" / corpus


def wrap_data_outputs(p: Params) -> list[str]:
    return [str(wrap_data_dir(p, c) / f) for c in p.studies.wrap.corpora for f in char_stages.DATA_FILES]


def wrap_analysis_dir(p: Params, corpus: str) -> Path:
    """analysis.out_dir of a counterfactual: its corpus analysis lands in <this>/corpus/."""
    return root(p) / "wrap" / "analysis" / corpus


def wrap_corpus_summaries(p: Params) -> list[str]:
    return [str(wrap_analysis_dir(p, c) / "corpus" / SUMMARY) for c in p.studies.wrap.corpora]


def wrap_runs(p: Params) -> dict[str, tuple[str, RunSpec]]:
    """{run id: (corpus, the matrix run it repeats on that corpus)}."""
    out = {}
    for corpus in p.studies.wrap.corpora:
        for row in wrap_rows(p):
            for seed in seeds(p):
                spec = find_run(p, f"{row}-s{seed}")
                run_id = f"{row}-{corpus}-s{seed}"
                out[run_id] = (corpus, dataclasses.replace(spec, run_id=run_id, label=f"{spec.label}, {corpus}"))
    return out


def wrap_original_runs(p: Params) -> list[str]:
    """The main DAG's runs the wrap study compares with (not retrained)."""
    return [f"{row}-s{seed}" for row in wrap_rows(p) for seed in seeds(p)]


def wrap_run_dir(p: Params) -> Path:
    return root(p) / "wrap" / "runs"


# ----------------------------------------------------------------------------- GKA init
@dataclasses.dataclass(frozen=True)
class InitRun:
    """One run of the GKA-init study: `spec` is its track's run of the row with
    options.init_sigma set and the study's run id."""
    track: str   # char, lm or vision
    label: str   # the init as it appears in run ids (init_label)
    spec: RunSpec


def init_base_runs(p: Params, track: str, row: str) -> list[RunSpec]:
    """The runs of `track`'s row `row` the study repeats per init: the char row at
    studies.gka_init.seeds (or the studies' seeds), an LM or vision row at the seeds its track
    trains it with."""
    if track == "char":
        r = next(r for r in p.matrix.rows if r.name == row)
        own = p.studies.gka_init.seeds
        return runs_of([r if own is None else dataclasses.replace(r, seeds=own)], seeds(p))
    # none when the scale's rows leave the row out (config.studies.init_rows_not_trained)
    return [r for r in (lm_runs(p.lm) if track == "lm" else vision_runs(p.vision)) if r.row == row]


def gka_runs(p: Params) -> dict[str, InitRun]:
    """{run id: the run}: each gka_init row x init x seed. Run ids: <row>-init_<init>-s<seed>
    for the char track, <track>_<row>-init_<init>-s<seed> for the others."""
    out = {}
    for entry in p.studies.gka_init.rows:
        base = init_base_runs(p, entry.track, entry.row)
        prefix = "" if entry.track == "char" else f"{entry.track}_"
        for init in p.studies.gka_init.inits:
            label = init_label(init)
            for run in base:
                run_id = f"{prefix}{run.row}-init_{label}-s{run.seed}"
                out[run_id] = InitRun(entry.track, label, dataclasses.replace(
                    run, run_id=run_id, options={**run.options, "init_sigma": init},
                    label=f"{run.label or run.row}, sigma init {label}"))
    return out


def gka_run_dir(p: Params) -> Path:
    return root(p) / "gka_init" / "runs"


# ----------------------------------------------------------------------------- prune
def prune_runs(p: Params) -> list[str]:
    """The main DAG's GPA runs the prune study reads."""
    return [f"{row}-s{seed}" for row in prune_rows(p) for seed in seeds(p)]


def prune_dir(p: Params, run_id: str) -> Path:
    return root(p) / "prune" / run_id


def prune_output(p: Params, run_id: str) -> str:
    return str(prune_dir(p, run_id) / SUMMARY)


def command() -> str:
    return "snakemake --cores all studies"
