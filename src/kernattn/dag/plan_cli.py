"""`kernattn plan`: the FLOPs, GPU-hours and wall time of every training and evaluation job of
the DAG at a scale, and of the whole DAG on a cluster, before anything is launched.

    kernattn plan --scale paper                                  # one 8-GPU H100 node
    kernattn plan --scale paper --gpu a100 --gpus-per-node 8 --nodes 2 --mfu 0.4 --out plan.csv
    kernattn plan --scale tiny --gpu cpu --gpus-per-node 2       # this machine: 2 runs at a time
    kernattn plan --scale paper --lm-eval-suite                  # lm-eval's 0-shot suite per LM row and task

The method and its assumptions: kernattn.dag.plan.
"""

from __future__ import annotations

import argparse

from .plan import MEASURED, PROFILE, SAFETY
from .plan_flops import plan_reports


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", default="h100", metavar="KIND",
                        help="GPU kind of src/kernattn/bench/gpus.yaml (h100, h200, a100, ...) or cpu (default h100)")
    parser.add_argument("--gpus-per-node", type=int, default=8, metavar="G", help="GPUs per node (default 8)")
    parser.add_argument("--nodes", type=int, default=1, metavar="N", help="nodes of the cluster (default 1)")
    parser.add_argument("--mfu", type=float, default=None, metavar="F",
                        help="model FLOPs utilisation (default: gpu-check's measurement in results/gpu/, "
                             "else the kind's stated default)")
    parser.add_argument("--profile", default=PROFILE, metavar="FILE",
                        help=f"snakemake profile whose set-resources give GPUs per run (default {PROFILE})")
    parser.add_argument("--safety", type=float, default=SAFETY, metavar="X",
                        help=f"SLURM time limit = planned wall time x X + start-up margin (default {SAFETY})")
    for name, (text, _report) in plan_reports().items():  # a unit's own report on its plan (its cost.PLAN_REPORTS)
        parser.add_argument(f"--{name}", action="store_true", help=text)
    parser.add_argument("--out", default=None, metavar="CSV",
                        help="also write the per-job table as CSV and the DAG's summary beside it (.json); "
                             "the report shows results/<scale>/plan/{<scale>,paper}.csv")


def compute(args: argparse.Namespace):
    """(params, plan) for the parsed arguments."""
    from ..config import params_from_args
    from ..errors import UsageError
    from .plan import make_plan, measured_loader, profile_gpus, resolve_device
    from .stages import stage_table

    if args.gpus_per_node < 1 or args.nodes < 1:
        raise UsageError(f"--gpus-per-node {args.gpus_per_node} --nodes {args.nodes}: both must be >= 1")
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise UsageError(f"--mfu {args.mfu}: must be in (0, 1]")
    params = params_from_args(args)
    device = resolve_device(args.gpu, args.mfu, params.train.threads or 1, MEASURED)
    gpus_of = profile_gpus(args.profile) if args.gpu != "cpu" else (lambda _stage: 1)
    return params, make_plan(params, stage_table(params), device, args.gpus_per_node * args.nodes, gpus_of,
                             measured_loader())


def render(plan, safety: float) -> str:
    from .plan import summary, table

    frame = table(plan, safety)
    s = summary(plan)
    head = (f"plan of scale {s['scale']!r} on {s['gpus']} x {s['gpu']} (peak {s['peak_flops']:.3g} FLOP/s, "
            f"MFU {s['mfu']:.2f}: {s['mfu_source']})")
    body = frame.to_string(index=False, formatters={
        "flops_per_step": "{:.3e}".format, "flops": "{:.3e}".format, "gpu_hours": "{:.4g}".format,
        "wall_h": "{:.4g}".format}) if len(frame) else "(no planned jobs)"
    tracks = ", ".join(f"{t} {h:.2f}" for t, h in s["gpu_hours_by_track"].items())
    tables = ", ".join(f"{k} {h:.2f}" for k, h in s["gpu_hours_by_paper_table"].items())
    studies = ", ".join(f"{k} {h:.2f}" for k, h in s["gpu_hours_by_study"].items())
    tail = [f"jobs: {s['jobs']}; FLOPs {s['flops']:.3e}; GPU-hours {s['gpu_hours']:.2f} ({tracks})",
            f"GPU-hours of the main DAG (snakemake all) {s['gpu_hours_main']:.2f}; of the studies (snakemake "
            f"studies) {s['gpu_hours'] - s['gpu_hours_main']:.2f} ({studies or 'none planned'})",
            f"GPU-hours by paper table (a row two tables name counts in both): {tables}",
            f"critical path: {s['critical_path_h']:.2f} h ({' -> '.join(s['critical_path'])})",
            f"whole DAG on {s['gpus']} GPUs: {s['wall_h']:.2f} h wall (greedy schedule, critical path first)"]
    if s["input_bound_jobs"]:
        tail.append(f"held back by the input pipeline ({s['loader_images_per_s_per_worker']:.0f} img/s per worker, "
                    f"{s['loader_source']}): {', '.join(s['input_bound_jobs'])}")
    return "\n".join([head, body, *tail])


def run(args: argparse.Namespace) -> int:
    import json
    from ..io import atomic_write_text
    from ..plan_files import summary_path
    from .plan import summary, table

    for name, (_text, report) in plan_reports().items():
        if getattr(args, name.replace("-", "_")):
            return _unit_report(args, report)
    _, plan = compute(args)
    print(render(plan, args.safety))
    if args.out:
        atomic_write_text(args.out, table(plan, args.safety).to_csv(index=False))
        summary_file = summary_path(args.out)
        atomic_write_text(summary_file, json.dumps(summary(plan), indent=2) + "\n")
        print(f"wrote {args.out} and {summary_file}")
    return 0


def _unit_report(args: argparse.Namespace, report) -> int:
    """A unit's report on the plan instead of the plan (e.g. --lm-eval-suite), on the plan's device."""
    from ..config import params_from_args
    from .plan import resolve_device

    params = params_from_args(args)
    device = resolve_device(args.gpu, args.mfu, params.train.threads or 1, MEASURED)
    print(report(params, device))
    return 0
