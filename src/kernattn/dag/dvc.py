"""dvc.yaml from the stage table: the DVC form of the Snakefile's DAG.

Snakemake computes the DAG at parse time; DVC cannot (its templating cannot select the
scale's rows and seeds), so dvc.yaml is generated from the same table:

    kernattn dvc-yaml                 # write dvc.yaml for params.yaml's scale
    kernattn dvc-yaml --check         # exit 1 if dvc.yaml is out of date (tests, CI)
    kernattn dvc-yaml --cache         # outputs go into the DVC cache (to push them to a remote)

A per-run stage is one DVC `foreach` stage over its run ids, so its instances are named
`<stage>@<run>` exactly as the Snakemake jobs of the rule of the same name. DVC's foreach has
one body (its templating cannot interpolate a list of deps), so where runs train plugins the
stage splits by plugin files: the runs of built-ins keep `<stage>`, those of a plugin file
`my_attention.py` are `<stage>-my_attention@<run>`, with that file among their deps only.

Beside the stages, dvc.yaml declares what `dvc metrics show`, `dvc plots show` and the metric
columns of `dvc exp show` read: top-level `metrics:` and `plots:`, paths inside the stages'
outputs (a metrics out of a foreach stage would nest in its run folder, which DVC forbids), so
they need no cache flag of their own and read the same with or without --cache:

    metrics   each run's final record: the char runs' and their cooldowns' final.json
              (val_loss), the LM runs' final.json and evaluation (val_bpb), the ViT runs'
              final.json (top1)
    plots     the validation curves as the report draws them (DVC cannot read the runs'
              metrics.jsonl: JSON lines), the length-extrapolation tables, the budget
              sweep's gaps and the claims summary (a CSV: DVC's metrics must be JSON, YAML
              or TOML, its plots may be CSV)

    dvc metrics show --json           # every record (the table has a column per key of any record)
    dvc exp show --drop '.*' --keep Experiment --keep '.*:(val_loss|val_bpb|top1)$'
    dvc plots show                    # -> dvc_plots/index.html
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path

import yaml

from ..config import Params, params_from_args
from ..io import atomic_write_text
from ..stage import DVC_ITEM, Stage
from ..units import UNITS
from ..yaml_text import safe_load
from .snakemake import scale_args
from .stages import run_plugin_files, stage_table


def watched(params: Params, params_file: str, sections: tuple[str, ...]) -> list[dict]:
    """The params.yaml keys a stage reads: `scale`, each section, and the chosen scale's
    override of it where the file has one. Exact keys are what lets `dvc exp run -S k=v`
    rerun only the stages that read k (DVC fails on keys the file lacks: list only those)."""
    doc = safe_load(Path(params.path).read_text()) or {}
    override = (doc.get("scales") or {}).get(params.scale) or {}
    keys = ["scale"]
    for section in sections:
        if section in doc:
            keys.append(section)
        if section in override:
            keys.append(f"scales.{params.scale}.{section}")
    return [{params_file: keys}]


def dvc_stage(stage: Stage, params: Params, params_file: str, cache: bool, extra_deps=()) -> dict:
    """One stage's entry: a plain stage, or a foreach over its runs: a list of run ids where
    each run's inputs are the body's with its id for `${item}`, else a mapping of run id to
    the inputs that differ (`per_run_inputs`)."""
    if not stage.per_run:
        return _body(stage, params, params_file, cache, None, stage.inputs(None), extra_deps)
    inputs, items = per_run_inputs(stage)
    if items:
        return {"foreach": items, "do": _body(stage, params, params_file, cache, DVC_KEY, inputs, extra_deps)}
    inputs = [path.replace(DVC_KEY, DVC_ITEM) for path in inputs]
    return {"foreach": list(stage.runs), "do": _body(stage, params, params_file, cache, DVC_ITEM, inputs, extra_deps)}


def _body(stage: Stage, params: Params, params_file: str, cache: bool, run: str | None, inputs: list[str],
          extra_deps) -> dict:
    flags = {"cache": cache, "persist": True} if stage.persist else {"cache": cache}
    return {
        "cmd": stage.cmd(scale_args(params, params_file), run),
        "deps": [*inputs, *extra_deps, *stage.code_paths()],
        "params": watched(params, params_file, stage.params),
        "outs": [{out: dict(flags)} for out in (stage.dvc_outs or stage.outputs)(run)],
    }


DVC_KEY = "${key}"  # a foreach over a mapping: the run id is the key, its own inputs the item


def per_run_inputs(stage: Stage) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The body's inputs, with `${key}` for the run id, and each run's own fields ({} where no
    run needs any: a list foreach does). Where the body's inputs with each run's id put in are
    exactly that run's own, they are the body's. Otherwise (a cooldown reads its trunk run's
    final.json, whose id is not its own) an input every run shares stays as it is, one that is
    the run's id put into a path is written with `${key}`, any other is `${item.dep<k>}` with
    the run's own path: each instance depends on its own inputs only, and DVC reruns no other
    run's branch when one run changes. Runs whose numbers of inputs differ keep the body's
    list (every run's inputs, a superset: DVC's one body)."""
    body = stage.inputs(DVC_ITEM)
    own = {run: stage.inputs(run) for run in stage.runs}
    if (all(own[run] == [path.replace(DVC_ITEM, run) for path in body] for run in stage.runs)
            or len({len(paths) for paths in own.values()}) != 1):
        return [path.replace(DVC_ITEM, DVC_KEY) for path in body], {}
    first, template, items = stage.runs[0], [], {run: {} for run in stage.runs}
    for k, column in enumerate(zip(*(own[run] for run in stage.runs))):
        if len(set(column)) == 1:
            template.append(column[0])
        elif first in column[0] and all(path == column[0].replace(first, run) for run, path in zip(stage.runs, column)):
            template.append(column[0].replace(first, DVC_KEY))
        else:
            template.append(f"${{item.dep{k}}}")
            for run, path in zip(stage.runs, column):
                items[run][f"dep{k}"] = path
    return template, (items if any(items.values()) else {})


def plugin_groups(stage: Stage) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """{DVC stage name: (runs, plugin files)}: the stage's runs grouped by the plugin files
    they train; the group without plugins keeps the stage's name."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for run in stage.runs:
        groups.setdefault(tuple(run_plugin_files(stage, run)), []).append(run)
    out = {}
    for files, runs in groups.items():
        name = "-".join([stage.name, *(Path(f).stem for f in files)])
        out[re.sub(r"[^A-Za-z0-9_-]", "_", name)] = (tuple(runs), files)
    return out


def dvc_stages(params: Params, params_file: str = "params.yaml", cache: bool = False) -> dict:
    """dvc.yaml's content: every stage of the table with at least one job (a foreach over
    no runs is not valid DVC); a per-run stage split by the plugin files its runs train."""
    out, table = {}, stage_table(params)
    for s in table.values():
        if not s.per_run:
            out[s.name] = dvc_stage(s, params, params_file, cache)
            continue
        for name, (runs, files) in plugin_groups(s).items():
            out[name] = dvc_stage(dataclasses.replace(s, runs=runs), params, params_file, cache, files)
    return {"stages": out, "metrics": [*metrics(table), f"{params.report.out_dir}/{CLAIMS_SUMMARY}"],
            "plots": plots(params)}


# The report's count of verdicts, in all and per document (report.summary.tally): a metric.
CLAIMS_SUMMARY = "tables/claims-summary.json"
# What the report writes under report.out_dir (kernattn.page.build, tracks/char/report*.py).
REPORT_PLOTS = (
    ("assets/val_curves_all.png", None),
    ("tables/claims.csv", {"x": "estimate", "y": "claim", "template": "bar_horizontal",
                           "title": "Claims: our estimate (empty: not judged at this scale)"}),
    ("tables/budget-gaps.csv", {"x": "budget", "y": "gap", "template": "scatter",
                                "title": "Budget sweep: each compared gap against the training budget"}),
)


def metrics(table: dict[str, Stage]) -> list[str]:
    """Every run's final record: the JSON outputs of each run of the per-run stages that say
    they are metrics (Stage.metric: a main-DAG training or evaluation)."""
    return [out for stage in table.values() if stage.metric and stage.per_run
            for run in stage.runs for out in stage.outputs(run) if out.endswith(".json")]


def plots(params: Params) -> list:
    """Each unit's plots (its stages.py's dvc_plots, e.g. the extrapolation tables) and the
    report's (REPORT_PLOTS); an image is a bare path."""
    out: list = [plot for u in UNITS if hasattr(m := u.module("stages"), "dvc_plots") for plot in m.dvc_plots(params)]
    for name, props in REPORT_PLOTS:
        path = f"{params.report.out_dir}/{name}"
        out.append({path: dict(props)} if props else path)
    return out


def render(params: Params, params_file: str, cache: bool = False) -> str:
    header = (
        "# GENERATED by `kernattn dvc-yaml` from params.yaml (scale: %s): do not edit by hand.\n"
        "# The same stage table as the Snakefile; regenerate after changing the scale or the matrix.\n" % params.scale
    )
    return header + yaml.safe_dump(dvc_stages(params, params_file, cache), sort_keys=False, width=120)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="dvc.yaml", help="where to write (default dvc.yaml)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if --out differs")
    parser.add_argument("--cache", action="store_true",
                        help="put the outputs in the DVC cache (to `dvc push` results and checkpoints to a remote)")


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # a ParamsError is one line (cli.main)
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
    stages = safe_load(text)["stages"]
    print(f"wrote {out}: {len(stages)} stages, {sum(len(s.get('foreach', [None])) for s in stages.values())} jobs "
          f"(scale {params.scale})")
    return 0
