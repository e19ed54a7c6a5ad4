"""The SLURM time limits of the planned stages (kernattn.dag.plan), written into a snakemake
profile: `kernattn install-profile --plan-scale paper` sets each planned stage's `runtime:`
(minutes) under set-resources to its longest run's planned wall time x the safety factor +
the start-up margin (plan.stage_minutes), so that no job is killed for a guess."""

from __future__ import annotations

import argparse

from ..yaml_text import safe_load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """install-profile's options for the time limits."""
    from .plan import SAFETY

    parser.add_argument("--plan-scale", default=None, metavar="S",
                        help="set the training and evaluation stages' runtime from `kernattn plan` at this scale "
                             "(default: keep the profile's)")
    parser.add_argument("--plan-params", default="params.yaml", metavar="FILE", help="params file of the plan")
    parser.add_argument("--plan-gpu", default=None, metavar="KIND",
                        help="GPU kind of the plan (default: --gpu-model if it names one, else h100)")
    parser.add_argument("--plan-mfu", type=float, default=None, metavar="F", help="MFU of the plan (default: kernattn plan's)")
    parser.add_argument("--safety", type=float, default=SAFETY, metavar="X", help=f"time limit = plan x X + margin (default {SAFETY})")


def plan_minutes(args: argparse.Namespace, profile_text: str) -> dict[str, int]:
    """stage -> minutes of the plan the install-profile arguments ask for ({} without --plan-scale)."""
    from ..bench import peaks
    from ..config import load_params, overrides_sources
    from .plan import make_plan, measured_loader, profile_doc_gpus, resolve_device, stage_minutes
    from .stages import stage_table

    if not args.plan_scale:
        return {}
    kind = args.plan_gpu or (args.gpu_model.lower() if args.gpu_model.lower() in peaks.kinds() else "h100")
    # the plan of the params the DAG will run: the --plan-params file with the command's --overrides
    params = load_params(args.plan_params, args.plan_scale, overrides_sources(args.overrides))
    gpus_of = profile_doc_gpus(safe_load(profile_text))  # the GPUs per run of the profile installed
    plan = make_plan(params, stage_table(params), resolve_device(kind, args.plan_mfu), 10**6, gpus_of, measured_loader())
    return stage_minutes(plan, args.safety)


def set_runtimes(text: str, minutes: dict[str, int]) -> str:
    """The profile text with `runtime:` of each stage in `minutes` (under set-resources) set;
    a stage's block without one gets it after its name; comments and order kept."""
    lines, out = text.splitlines(keepends=True), []
    section, stage, done = None, None, set()

    def close():
        if stage in minutes and stage not in done:
            out.append(f"    runtime: {minutes[stage]}\n")
            done.add(stage)
    for line in lines:
        stripped, indent = line.strip(), len(line) - len(line.lstrip())
        if stripped and not stripped.startswith("#") and indent <= 2:
            close()
            stage = stripped.rstrip(":") if indent == 2 and section == "set-resources" else None
            section = stripped.rstrip(":") if indent == 0 else section
        elif stage in minutes and stripped.startswith("runtime:") and indent == 4:
            line = f"{line[:indent]}runtime: {minutes[stage]}{_comment(stripped)}\n"
            done.add(stage)
        out.append(line)
    close()
    return "".join(out)


def _comment(stripped: str) -> str:
    return f"   {stripped[stripped.index('#'):]}" if "#" in stripped else ""
