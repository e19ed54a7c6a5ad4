"""The DAG as data: the stages, their commands and files, from params.yaml.

The Snakefile and dvc.yaml describe the same DAG. Snakemake computes it at parse time from
`run_matrix(params)`; DVC cannot (its templating cannot select the scale's rows and seeds),
so dvc.yaml is generated from the same function:

    kernattn dvc-yaml                 # write dvc.yaml for params.yaml's scale
    kernattn dvc-yaml --check         # exit 1 if dvc.yaml is out of date (tests, CI)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import yaml

from . import analysis
from .config import Params, find_run, load_params, run_matrix
from .io import atomic_write_text
from .vision import stages as vision_stages
from .lm import pipeline as lm_pipeline

HELP = "write dvc.yaml (the DVC form of the Snakefile's DAG) from params.yaml"

DATA_FILES = ("train.npy", "val.npy", "vocab.json", "meta.json")
CODE_DEPS = ("src/kernattn",)


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
    """One run's row and seed: the matrix entry a per-run rule depends on (so that adding a
    row to the matrix does not rerun the other runs' analyses)."""
    return dataclasses.asdict(find_run(params, run_id))


def scale_args(params: Params, params_file: str) -> str:
    return f"--params {params_file} --scale {params.scale}"


def watched(params: Params, params_file: str, sections: tuple[str, ...]) -> list[dict]:
    """The params.yaml keys a stage reads: `scale`, each section, and the chosen scale's
    override of it where the file has one. Exact keys are what lets `dvc exp run -S k=v`
    rerun only the stages that read k (DVC fails on keys the file lacks: list only those)."""
    doc = yaml.safe_load(Path(params.path).read_text()) or {}
    override = (doc.get("scales") or {}).get(params.scale) or {}
    keys = ["scale"]
    for section in sections:
        if section in doc:
            keys.append(section)
        if section in override:
            keys.append(f"scales.{params.scale}.{section}")
    return [{params_file: keys}]


def train_command(params: Params, params_file: str, run_id: str) -> str:
    """The pipeline reruns a run only when its inputs or params changed: a folder left by
    other params is archived (kept under .stale/), not an error."""
    return f"kernattn train {scale_args(params, params_file)} --run {run_id} --stale archive"


def dvc_stages(params: Params, params_file: str = "params.yaml", cache: bool = False) -> dict:
    """dvc.yaml content: prepare -> train-<run_id> (one per run) -> analyze-corpus and
    analyze-<run_id> (one per GPA run); bench (no inputs but code and params) -> report.

    A training stage's output is its whole run folder, `persist`ed so that DVC does not delete
    the checkpoint a rerun resumes from; `cache` puts every output into the DVC cache (for
    `dvc push` to a remote)."""
    args = scale_args(params, params_file)
    train_keys = ("model", "train", "matrix", "tracking")
    stages = {
        "prepare": {
            "cmd": f"kernattn prepare {args}",
            "deps": ["src/kernattn/data"],
            "params": watched(params, params_file, ("data",)),
            "outs": [{p: {"cache": cache}} for p in data_outputs(params)],
        }
    }
    runs = run_matrix(params)
    for run in runs:
        stages[f"train-{run.run_id}"] = {
            "cmd": train_command(params, params_file, run.run_id),
            "deps": [*data_outputs(params)[:3], *CODE_DEPS],
            "params": watched(params, params_file, train_keys),
            "outs": [{f"{params.train.out_dir}/{run.run_id}": {"cache": cache, "persist": True}}],
        }
    stages["analyze-corpus"] = {
        "cmd": f"kernattn analyze-corpus {args}",
        "deps": [*data_outputs(params)[:3], "src/kernattn/analysis"],
        "params": watched(params, params_file, ("data", "analysis")),
        "outs": [{str(analysis.corpus_dir(params)): {"cache": cache}}],
    }
    gpa = gpa_run_ids(params)
    for run_id in gpa:
        stages[f"analyze-{run_id}"] = {
            "cmd": f"kernattn analyze-gpa {args} --run {run_id}",
            "deps": [*data_outputs(params)[:3], run_output(params, run_id), *CODE_DEPS],
            "params": watched(params, params_file, (*train_keys, "analysis")),
            "outs": [{str(analysis.run_dir(params, run_id)): {"cache": cache}}],
        }
    stages["bench"] = {
        "cmd": f"kernattn bench {args}",
        "deps": ["src/kernattn/bench", "src/kernattn/models", "src/kernattn/attention"],
        "params": watched(params, params_file, ("bench", "model", "matrix")),
        "outs": [{params.bench.out_dir: {"cache": cache}}],
    }
    stages["report"] = {
        "cmd": f"kernattn report {args}",
        "deps": [data_outputs(params)[3], *(run_output(params, r.run_id) for r in runs),
                 str(analysis.corpus_dir(params)), *(str(analysis.run_dir(params, r)) for r in gpa),
                 params.bench.out_dir, "src/kernattn/report"],
        "params": watched(params, params_file, ("report", "matrix", "analysis", "bench")),
        "outs": [{params.report.out_dir: {"cache": cache}}],
    }
    vision_stages.add_dvc_stages(stages, params, params_file, cache)  # GKA on vision (issue 5)
    lm_pipeline.add_dvc_stages(stages, params, params_file, cache)
    return {"stages": stages}


def render(params: Params, params_file: str, cache: bool = False) -> str:
    header = (
        "# GENERATED by `kernattn dvc-yaml` from params.yaml (scale: %s): do not edit by hand.\n"
        "# The same DAG as the Snakefile; regenerate after changing the scale or the matrix.\n" % params.scale
    )
    return header + yaml.safe_dump(dvc_stages(params, params_file, cache), sort_keys=False, width=120)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    parser.add_argument("--scale", default=None, help="scale to use (default: the file's `scale`)")
    parser.add_argument("--out", default="dvc.yaml", help="where to write (default dvc.yaml)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if --out differs")
    parser.add_argument("--cache", action="store_true",
                        help="put the outputs in the DVC cache (to `dvc push` results and checkpoints to a remote)")


def run(args: argparse.Namespace) -> int:

    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    out = Path(args.out)
    # DVC runs commands from dvc.yaml's folder: name the params file relative to it.
    text = render(params, os.path.relpath(args.params, start=out.parent.resolve()), args.cache)
    if args.check:
        if not out.is_file() or out.read_text() != text:
            print(f"{out} is out of date with {args.params} (scale {params.scale}): run `kernattn dvc-yaml`",
                  file=sys.stderr)
            return 1
        print(f"{out} is up to date")
        return 0
    atomic_write_text(out, text)
    print(f"wrote {out}: {len(run_matrix(params))} training stages (scale {params.scale})")
    return 0
