"""The stage table: every stage of every unit, from params (the DAG as data).

    each unit's stages (<unit>.stages.stages, for the units of kernattn.units.UNITS): the
    tracks' data, training and analyses; length extrapolation and the studies; the benchmark
    plan (the scale's cost: kernattn plan);  report (what each unit says the page reads)
    the studies but extrapolation are outside `all` (the Snakefile's `studies` target: the
    stages the units name in `targets`)

The Snakefile's rules (one per stage, made in a loop) and dvc.yaml (dag.dvc) both read this table, so the
two DAGs have the same stages, files and params sections. Training stages do not read
`tracking`: where a run is mirrored does not change what it computes, so a new tracking URI
must not retrain (`kernattn sync-mlflow` uploads finished runs to the new store).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..config import Params
from ..stage import Stage
from ..units import UNITS
from ..plan_files import plan_arguments, plan_csv, summary_path
from .plan_flops import cost_modules

STUDY_TARGETS = tuple(t for u in UNITS for t in u.targets)  # the Snakefile's `studies` target


def report_output(params: Params) -> str:
    return f"{params.report.out_dir}/index.html"


def unit_stages(p: Params) -> list[Stage]:
    return [s for u in UNITS for s in u.module("stages").stages(p)]


def page_stages(p: Params) -> list[Stage]:
    """The plan and the report: above the units (what each unit says the page reads of it)."""
    modules = [u.module("stages") for u in UNITS]
    plan = Stage("plan", plan_sections(), ("dag", "tracks", "studies", "attention", "bench", "plan_files.py", "work.py"),
                 lambda _: plan_outputs(p),
                 inputs=lambda _: plan_inputs(p),
                 extra=plan_arguments(p, p.scale))
    report_inputs = [*(f for m in modules for f in m.report_inputs(p)), *plan_outputs(p)]
    sync = sync_stage(p, report_inputs)
    report_inputs += sync.outputs(None) if sync else []
    report = Stage("report", ("report", *(s for m in modules for s in m.REPORT_SECTIONS)),
                   ("report", "page", *dict.fromkeys(u.package.split(".")[1] for u in UNITS)),
                   lambda _: [report_output(p)], inputs=lambda _: report_inputs,
                   dvc_outs=lambda _: [p.report.out_dir], local=True)
    return [plan, *([sync] if sync else []), report]


def sync_stage(p: Params, report_inputs: list[str]) -> Stage | None:
    """tracking.live false: one job uploads every finished run the report reads to MLflow once they
    are all done (`kernattn sync-mlflow --record`), recording their MLflow ids beside them rather than
    in their final.json. None where each training logs its own run (live) or tracking is off."""
    if p.tracking.live or not p.tracking.enabled:
        return None
    from ..tracking.client import synced_record

    record = str(synced_record(p.scale))
    finals = [f for f in report_inputs if f.endswith("/final.json")]
    return Stage("sync_mlflow", ("tracking",), ("tracking", "engine/mlrun.py"),
                 lambda _: [record], inputs=lambda _: finals, extra=f"--record {record}", local=True)


def plan_sections() -> tuple[str, ...]:
    """What `kernattn plan` reads: every model, schedule and run list of the main DAG and the
    studies (each unit's cost.PLAN_SECTIONS)."""
    return tuple(dict.fromkeys(s for m in cost_modules() for s in m.PLAN_SECTIONS))


def plan_inputs(p: Params) -> list[str]:
    """The prepared data whose sizes the plan counts (each unit's cost.plan_inputs: the char
    vocabulary, the ViT's images)."""
    return [f for m in cost_modules() if hasattr(m, "plan_inputs") for f in m.plan_inputs(p)]


def plan_outputs(p: Params) -> list[str]:
    """The scale's own plan (the report's "Cost plan" part): the table and its summary."""
    csv = plan_csv(p, p.scale)
    return [csv, str(summary_path(csv))]


def studies_outputs(stages: dict[str, Stage]) -> list[str]:
    """What the Snakefile's `studies` target asks for: each study's summary."""
    return [f for name in STUDY_TARGETS for f in stages[name].outputs(None)]


def stage_table(params: Params) -> dict[str, Stage]:
    """Every stage, in an order that runs (upstream first), by name: each unit's in UNITS order,
    then the plan and the report."""
    stages = [*unit_stages(params), *page_stages(params)]
    return {s.name: with_plugin_inputs(s) for s in stages}


def plugin_files(view: dict) -> list[str]:
    """The files of the plugins whose variants a run's params view (Stage.narrow: its rows, or
    its run spec) names, relative to the current folder where they lie under it."""
    from ..attention.registry import plugin_of

    out = []
    for section in view.values():  # a section with `rows` (LM, ViT), or one run's spec (char)
        rows = (section.get("rows") or [section]) if isinstance(section, dict) else []
        for row in rows:
            plugin = plugin_of(str(row.get("variant", ""))) if isinstance(row, dict) else None
            if plugin is not None and plugin.file.endswith(".py"):
                path = Path(plugin.file)
                out.append(str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path))
    return list(dict.fromkeys(out))


def run_plugin_files(stage: Stage, run: str) -> list[str]:
    """The plugin files one run of a per-run stage trains (none without plugins)."""
    from ..attention.registry import has_plugins

    if not stage.per_run or stage.narrow is None or run not in stage.runs or not has_plugins():
        return []
    return plugin_files(stage.narrow(run))


def with_plugin_inputs(stage: Stage) -> Stage:
    """A per-run stage whose runs may train a plugin's variant: the plugin's file is an input of
    exactly those runs (editing it reruns them). The DVC template (a run id not among the
    stage's) gets none: dvc.yaml splits the foreach by plugin files (dag/dvc.py)."""
    if not any(run_plugin_files(stage, r) for r in stage.runs or ()):
        return stage
    own = stage.inputs

    def inputs(run: str) -> list[str]:
        return [*own(run), *run_plugin_files(stage, run)]
    return dataclasses.replace(stage, inputs=inputs)
