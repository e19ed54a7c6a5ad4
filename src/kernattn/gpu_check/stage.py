"""`kernattn gpu-check`: one command that proves and measures every GPU path, in parts.

    kernattn gpu-check --part all                 # on a GPU node: results/gpu/<device>/
    kernattn gpu-check --part kernels --force     # one part again, replacing its files
    kernattn gpu-check --tiny                     # tiny shapes (always on CPU): seconds

Parts: tests (fast paths vs the float64 reference, tests.csv), kernels (attention at the
FA3 paper's shapes, kernels.csv), models (the whole-model table, models.csv and
models_ratios.csv in `kernattn bench`'s format), train (the char GPT through `kernattn train`,
killed once and resumed, train.csv), ddp (`kernattn train --nproc N` on every GPU of the node
against one process training the same optimisation, ddp.csv), vit_ddp (DeiT/GKA/VLT-Ti training
throughput under DDP on every GPU of the node at 64 and 128 images per GPU, vit_ddp.csv); each
writes <part>.md and summary.md gathers them.
Default folder: results/gpu/<device> on CUDA (what is committed and what the report shows),
results/gpu-check-tiny/<device> for tiny shapes (never shown by the report). A file already
there is never replaced silently: the command refuses, naming it, unless --force.
Exit status 0 when every check passed, 1 when one failed (a missed performance target is a
measurement, shown in the summary, not a failure), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ..bench.stage import CSV_NAME as MODELS_CSV, RATIOS_NAME
from . import checks, ddp_run, kernels, train_run, vit_ddp, whole_models
from .common import PARTS, Context, default_out_dir, device_slug, guard, write_part_summary

MODULES = {"tests": checks, "kernels": kernels, "models": whole_models, "train": train_run, "ddp": ddp_run,
           "vit_ddp": vit_ddp}
FILES = {"tests": [checks.CSV_NAME], "kernels": [kernels.CSV_NAME], "models": [MODELS_CSV, RATIOS_NAME],
         "train": [train_run.CSV_NAME], "ddp": [ddp_run.CSV_NAME], "vit_ddp": [vit_ddp.CSV_NAME]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=(*PARTS, "all"), default="all", help="which part (default: all)")
    parser.add_argument("--out-dir", default=None,
                        help="output folder (default results/gpu/<device>, tiny: results/gpu-check-tiny/<device>)")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, seconds (always so on a CPU)")
    parser.add_argument("--force", action="store_true", help="replace the part's files if they exist")
    parser.add_argument("--family", action="append", choices=("vit", "char_gpt", "lm"), default=None,
                        help="models part: only this family (repeatable; default all three)")
    parser.add_argument("--rows", nargs="+", default=None, metavar="ROW",
                        help="train part: matrix rows to train (default rope gpa_m64_rope; the first is killed once)")
    parser.add_argument("--corpus", default=None,
                        help="train part: the char corpus .txt/.txt.gz, cleaned as params.yaml's data section says (default: its tiny mirror, Dickens)")
    parser.add_argument("--work-dir", default=None,
                        help="train part: keep its params, data, run folders and logs here (default: a temporary folder)")


def context_from_args(args: argparse.Namespace) -> Context:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tiny = args.tiny or device.type != "cuda"
    if args.out_dir:
        out_dir = Path(args.out_dir)
    else:
        out_dir = Path("results") / "gpu-check-tiny" / device_slug(device) if tiny else default_out_dir(device)
    # args.overrides is not read (cli.OVERRIDES_EFFECT): every part loads the params file at a
    # fixed scale (paper, micro, its own gpucheck), so that its records measure those shapes
    ctx = Context(device=device, tiny=tiny, out_dir=out_dir, force=args.force, params=args.params,
                  corpus=args.corpus, work_dir=args.work_dir)
    if args.family:
        ctx.families = tuple(dict.fromkeys(args.family))
    if args.rows:
        ctx.train_rows = tuple(args.rows)
    return ctx


def run(args: argparse.Namespace) -> int:
    ctx = context_from_args(args)
    parts = PARTS if args.part == "all" else (args.part,)
    guard(ctx, [name for part in parts for name in FILES[part]])  # before any work is done
    ctx.out_dir.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(f"gpu-check: {', '.join(parts)} on {ctx.device} ({'tiny' if ctx.tiny else 'full'} shapes) -> {ctx.out_dir}")
    ok = True
    for part in parts:
        t0 = time.monotonic()
        result = MODULES[part].run_part(ctx, log)
        result.lines.append(f"\nPart time: {time.monotonic() - t0:.0f} s.")
        result.files.append(write_part_summary(ctx, result))
        ok &= result.ok
        log(f"gpu-check: {part} {'passed' if result.ok else 'FAILED'} ({time.monotonic() - t0:.0f} s): "
            f"{', '.join(result.files)}")
    print(f"wrote {ctx.out_dir / 'summary.md'}")
    return 0 if ok else 1
