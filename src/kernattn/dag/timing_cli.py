"""`kernattn timing`: what the DAG of a scale cost, rule by rule, beside what `kernattn plan` said.

    kernattn timing --scale tiny                                   # print the table
    kernattn timing --scale tiny --out results/timing/tiny.csv     # and keep it, with date, commit, machine
    kernattn timing --scale tiny --calibrate                       # the plan's CPU model fitted to it (gpus.yaml)

It reads the Snakemake benchmark file every job wrote (results/<scale>/benchmarks/, kernattn.dag
.timing) and the scale's plan (results/<scale>/plan/<scale>.csv). The CSV has one row per rule and a
last row `(DAG)` with the wall clock from the first job's start to the last one's end; every row
carries the date, commit, machine, core count and ATen CPU capability of the machine it ran on,
because two machines of one kind differ in the last (AVX2 against AVX512's bfloat16).
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import date
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None, metavar="CSV",
                        help="also write the per-rule table as CSV (results/timing/<scale>-<date>.csv, say)")
    parser.add_argument("--calibrate", action="store_true",
                        help="fit the plan's CPU model (start-up, efficiency per track) to these jobs and print the "
                             "cpu: block of src/kernattn/bench/gpus.yaml (kernattn.dag.calibrate)")


def machine() -> dict:
    """Where it ran: CPU model, cores, ATen's CPU capability (torch imported only here)."""
    from ..bench.timing import device_name
    from ..hardware import cpu_capability

    import torch

    return {"machine": device_name(torch.device("cpu")) or platform.machine(), "cores": os.cpu_count(),
            "cpu_capability": cpu_capability()}


def table(scale: str, plan_path: str):
    """The per-rule frame (measured, planned, ratio) and the DAG's span, for `scale`."""
    import pandas as pd

    from . import timing

    frame = timing.jobs(timing.folder_of(scale))
    if frame.empty:
        from ..errors import UsageError

        raise UsageError(f"{timing.folder_of(scale)}: no benchmark files; run the DAG at scale {scale} first "
                         f"(snakemake --cores all --config scale={scale})")
    plan = pd.read_csv(plan_path) if Path(plan_path).is_file() else None
    rules = timing.per_rule(frame).merge(timing.against_plan(frame, plan)[["rule", "planned_s", "ratio", "note"]],
                                         on="rule", how="left")
    return rules, timing.span(frame)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..config import params_from_args
    from ..io import atomic_write_text
    from ..plan_files import plan_csv

    params = params_from_args(args)
    if args.calibrate:
        print(calibration(params))
        return 0
    rules, span = table(params.scale, plan_csv(params, params.scale))
    print(rules.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"{span['jobs']} jobs: {span['job_s']:.0f} s of job time, {span['span_s']:.0f} s of wall clock "
          f"(first start to last end), CPU time sampled by Snakemake {span['cpu_s']:.0f} s")
    if args.out:
        total = {"rule": "(DAG)", "jobs": span["jobs"], "wall_s": span["span_s"], "cpu_s": span["cpu_s"]}
        out = pd.concat([rules, pd.DataFrame([total])], ignore_index=True)
        from ..engine.runtime import git_info

        commit = git_info(Path("."))[0]   # the checkout whose benchmark files these are
        head = {"date": date.today().isoformat(), "commit": commit and commit[:7], **machine(), "scale": params.scale}
        for i, (key, value) in enumerate(head.items()):
            out.insert(i, key, value)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, out.to_csv(index=False))
        print(f"wrote {args.out}")
    return 0


def calibration(params) -> str:
    """The fitted cpu: block, as YAML with its source line."""
    import json

    import pandas as pd
    import yaml

    from ..bench import peaks
    from ..plan_files import plan_csv, summary_path
    from . import calibrate, timing
    from .stages import stage_table

    plan_path = plan_csv(params, params.scale)
    if not Path(plan_path).is_file():
        from ..errors import UsageError

        raise UsageError(f"{plan_path}: no plan at scale {params.scale}; the DAG's plan stage writes it")
    # the peak the plan itself measured (its summary): on a 2-vCPU machine the matmul rate per CPU
    # second depends on what the other vCPU runs, so the efficiency is fitted against the rate the
    # plan divides by, measured under the DAG's own load
    summary = json.loads(summary_path(plan_path).read_text()) if summary_path(plan_path).is_file() else {}
    peak = float(summary.get("peak_flops") or peaks.measure_cpu_peak(params.train.threads or 1))
    jobs = calibrate.measurements(timing.jobs(timing.folder_of(params.scale)), pd.read_csv(plan_path),
                                  stage_table(params))
    fitted = calibrate.fit(jobs, peak)
    m = machine()
    source = (f"kernattn timing --calibrate on {date.today().isoformat()}, scale {params.scale}, {len(jobs)} jobs, "
              f"{m['machine']} ({m['cores']} cores, {m['cpu_capability']}), float32 matmul peak {peak / 1e9:.0f} GFLOP/s")
    return yaml.safe_dump({"cpu": {**fitted, "source": source}}, sort_keys=False, width=120)
