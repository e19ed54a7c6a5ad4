"""The char track's stages and the only owner of where its files live:

    prepare -> train@<run> -> analyze_gpa@<gpa run>, analyze_cope@<cope run>;  prepare -> analyze_corpus

    <data.out_dir>/                 train.npy, val.npy, vocab.json, meta.json (kernattn prepare)
    <train.out_dir>/<run>/          the engine's run folder (final.json written last)
    <analysis.out_dir>/corpus/      the corpus's newline histogram (kernattn analyze-corpus)
    <analysis.out_dir>/<run>/       one GPA run's kernel-bank readings (kernattn analyze-gpa), or
                                    one CoPE run's newline reading (kernattn analyze-cope)

No torch here: the stage table imports this module.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ...config import Params, RunSpec, find_run, run_matrix
from ...stage import RunFolders, Stage

NAME = "char"
DATA_FILES = ("train.npy", "val.npy", "vocab.json", "meta.json")
ARRAYS = DATA_FILES[:3]  # what a training reads (meta.json is provenance)
SUMMARY = "summary.json"
COPE_READING = "cope-newlines.json"  # analyze-cope's file in <analysis.out_dir>/<run>/
BUDGETS = "budgets"   # <train.out_dir>/budgets/<run>-b<budget>/: the budget sweep's cooldowns
CORPUS = "corpus"
SECTIONS = ("data", "model", "train", "matrix", "analysis")  # the params sections of this track
MODEL_SECTIONS = ("model", "matrix")      # what builds its models (the benchmark reads them)
REPORT_SECTIONS = ("matrix", "analysis")  # what its report part reads beside its outputs


# ----------------------------------------------------------------------------- runs
def runs(p: Params) -> list[RunSpec]:
    return run_matrix(p)


def gpa_runs(p: Params) -> list[RunSpec]:
    """The runs of the matrix that have kernel banks (variant gpa): what analyze-gpa reads."""
    return [r for r in run_matrix(p) if r.variant == "gpa"]


def cope_runs(p: Params) -> list[RunSpec]:
    """The runs of the matrix with CoPE attention: what analyze-cope reads (the CoPE control)."""
    return [r for r in run_matrix(p) if r.variant == "cope"]


def run_spec(p: Params, run_id: str) -> dict:
    """One run's row and seed: the part of `matrix` a per-run stage reads (so that adding a
    row to the matrix does not rerun the other runs)."""
    return dataclasses.asdict(find_run(p, run_id))


# ----------------------------------------------------------------------------- paths
def data_dir(p: Params) -> Path:
    return Path(p.data.out_dir)


def data_outputs(p: Params) -> list[str]:
    return [str(data_dir(p) / name) for name in DATA_FILES]


def array_inputs(p: Params) -> list[str]:
    """The prepared arrays a training or an analysis reads."""
    return [str(data_dir(p) / name) for name in ARRAYS]


RUNS = RunFolders("train")  # <train.out_dir>/<run id>/: the engine's run folder (stage.RunFolders)
runs_root, run_dir, final_output = RUNS.root, RUNS.run_dir, RUNS.final_output


def run_roots(p: Params) -> list[Path]:
    """The folders its runs lie in (what `kernattn sync-mlflow` walks): the matrix's runs and
    the budget sweep's cooldown branches."""
    return [runs_root(p), runs_root(p) / BUDGETS]


def budget_run_id(run_id: str, budget: int) -> str:
    """The id of a run's cooldown branched at `budget` steps (train.budgets)."""
    return f"{run_id}-b{budget}"


def split_budget_run_id(branch_id: str) -> tuple[str, int]:
    """(run id, budget) of budget_run_id's result; ValueError for anything else."""
    run_id, sep, budget = branch_id.rpartition("-b")
    if not sep or not budget.isdigit():
        raise ValueError(f"{branch_id!r} is not '<run>-b<budget>'")
    return run_id, int(budget)


def budget_dir(p: Params, run_id: str, budget: int) -> Path:
    """The folder of a run's cooldown branched at `budget` (its own engine run folder, beside
    the runs, not inside its run's folder: DVC outputs must not nest)."""
    return runs_root(p) / BUDGETS / budget_run_id(run_id, budget)


def budget_final_output(p: Params, branch_id: str) -> str:
    return str(runs_root(p) / BUDGETS / branch_id / "final.json")


def budget_inputs(p: Params, branch_id: str) -> list[str]:
    """What a cooldown reads: the prepared arrays and its run's final.json (the run kept its
    checkpoint at the branch point before finishing). Called with a pattern, not a branch id,
    it names every run's (dvc.yaml gives each branch its own: dag.dvc.per_run_inputs)."""
    try:
        run_id, _ = split_budget_run_id(branch_id)
        trunks = [run_id] if run_id in {r.run_id for r in runs(p)} else [r.run_id for r in runs(p)]
    except ValueError:
        trunks = [r.run_id for r in runs(p)]
    return [*array_inputs(p), *(final_output(p, r) for r in trunks)]


def budget_runs(p: Params) -> list[str]:
    """Every run's branch at every train.budgets (none without budgets)."""
    return [budget_run_id(r.run_id, b) for r in runs(p) for b in p.train.budgets]



def corpus_dir(p: Params) -> Path:
    return Path(p.analysis.out_dir) / CORPUS


def corpus_analysis_output(p: Params) -> str:
    return str(corpus_dir(p) / SUMMARY)


def analysis_dir(p: Params, run_id: str) -> Path:
    """One GPA run's readings (kernattn analyze-gpa)."""
    return Path(p.analysis.out_dir) / run_id


def analysis_output(p: Params, run_id: str) -> str:
    return str(analysis_dir(p, run_id) / SUMMARY)


def cope_output(p: Params, run_id: str) -> str:
    """One CoPE run's newline reading (kernattn analyze-cope)."""
    return str(analysis_dir(p, run_id) / COPE_READING)


def report_inputs(p: Params) -> list[str]:
    """What the report reads of this track: every run's final.json, the corpus and GPA
    readings, and the corpus's provenance (not its arrays)."""
    return [*(final_output(p, r.run_id) for r in runs(p)), *(budget_final_output(p, b) for b in budget_runs(p)),
            corpus_analysis_output(p),
            *(analysis_output(p, r.run_id) for r in gpa_runs(p)), *(cope_output(p, r.run_id) for r in cope_runs(p)),
            data_outputs(p)[3]]


# ----------------------------------------------------------------------------- stages
def stages(p: Params) -> list[Stage]:
    data, arrays = data_outputs(p), array_inputs(p)
    threads = p.train.threads or 4

    def narrow(run_id: str) -> dict:
        return {"matrix": run_spec(p, run_id)}
    return [
        Stage("prepare", ("data",), ("tracks/char/corpus.py", "tracks/char/data.py", "fetch.py"), lambda _: data),
        Stage("train", ("model", "train", "matrix"), ("",), lambda r: [final_output(p, r)],
              inputs=lambda _: arrays, dvc_outs=lambda r: [str(run_dir(p, r))],
              runs=tuple(r.run_id for r in runs(p)), extra="--stale archive", persist=True, threads=threads,
              narrow=narrow, metric=True),
        *([Stage("cooldown", ("model", "train", "matrix"), ("",), lambda r: [budget_final_output(p, r)],
                  inputs=lambda r: budget_inputs(p, r), dvc_outs=lambda r: [str(runs_root(p) / BUDGETS / r)],
                  runs=tuple(budget_runs(p)), extra="--stale archive", persist=True, threads=threads,
                  narrow=lambda r: narrow(split_budget_run_id(r)[0]) if r in budget_runs(p) else {}, metric=True)]
          if p.train.budgets else []),
        Stage("analyze_corpus", ("data", "analysis"), ("tracks/char/analysis",),
              lambda _: [corpus_analysis_output(p)], inputs=lambda _: arrays, dvc_outs=lambda _: [str(corpus_dir(p))]),
        Stage("analyze_gpa", ("model", "train", "matrix", "analysis"), ("",), lambda r: [analysis_output(p, r)],
              inputs=lambda r: [*arrays, final_output(p, r)], dvc_outs=lambda r: [str(analysis_dir(p, r))],
              runs=tuple(r.run_id for r in gpa_runs(p)), threads=threads, narrow=narrow),
        *([Stage("analyze_cope", ("model", "train", "matrix", "analysis"), ("",), lambda r: [cope_output(p, r)],
                 inputs=lambda r: [*arrays, final_output(p, r)], dvc_outs=lambda r: [str(analysis_dir(p, r))],
                 runs=tuple(r.run_id for r in cope_runs(p)), threads=threads, narrow=narrow)]
          if cope_runs(p) else []),
    ]
