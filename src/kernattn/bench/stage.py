"""`kernattn bench`: whole-model throughput, peak memory and MFU of every attention variant.

    kernattn bench                              # params.yaml's bench section at its scale
    kernattn bench --family vit --out-dir results/gpu/h100   # one family, a folder kept in git

Writes <out_dir>/models.csv (one row per model, mode and batch: bench.models.SCHEMA) and
<out_dir>/models_ratios.csv (each model against its baseline, measured in the same run, with
issue 7's targets judged on GPU). At the `paper` size it measures the papers' shapes (DeiT-Ti/S/B
and GKA/VLT at 224 px, the char GPT at ctx 256, the LM at depth 12 and sequence 2048); the tiny
and micro scales use `size: small`, the same code on a CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..config import BENCH_FAMILIES, params_from_args
from . import cases as case_builders
from .models import RATIO_SCHEMA, SCHEMA, Settings, compute_ratios, measure_family
from .typed_csv import write_csv_atomic

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CSV_NAME, RATIOS_NAME = "models.csv", "models_ratios.csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", action="append", default=None, choices=BENCH_FAMILIES,
                        help="measure only this family (repeatable; default: bench.families)")
    parser.add_argument("--out-dir", default=None, help="where to write the CSVs (default: bench.out_dir)")


def settings_for(bench, family: str, device: torch.device) -> tuple[Settings, tuple[str, ...]]:
    """The batch sizes and modes of one family: ViTs train at bench.train_batches and infer at
    bench.infer_batches (Table 4); the language models train at one batch each."""
    dtype = DTYPES[bench.dtype] if device.type == "cuda" else torch.float32  # CPU: float32
    base = dict(device=device, dtype=dtype, compile=bench.compile and device.type == "cuda",
                warmup=bench.warmup, reps=bench.reps)
    if family == "vit_paper":  # one small batch, few repetitions: 224 px costs seconds a step on a CPU
        base.update(warmup=bench.paper_vit_warmup, reps=bench.paper_vit_reps)
        return Settings(train_batches=(bench.paper_vit_batch,), infer_batches=(bench.paper_vit_batch,), **base), \
            ("train", "infer")
    if family == "vit":
        return Settings(train_batches=bench.train_batches, infer_batches=bench.infer_batches, **base), \
            ("train", "infer")
    batch = bench.char_batch if family == "char_gpt" else bench.lm_batch
    return Settings(train_batches=(batch,), infer_batches=(), **base), ("train",)


def family_cases(params, family: str):
    bench = params.bench
    if family == "char_gpt":
        return case_builders.char_gpt_cases(params, bench.char_rows, bench.size)
    if family == "vit":
        return case_builders.vit_cases(params, bench.size)
    if family == "vit_paper":
        return case_builders.paper_vit_cases(params, bench.paper_vit_sizes)
    return case_builders.lm_cases(params, bench.size)


def run(args: argparse.Namespace) -> int:
    from ..engine import resolve_device

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    bench = params.bench
    device = resolve_device(bench.device)
    if bench.threads:
        torch.set_num_threads(bench.threads)
    out_dir = Path(args.out_dir or bench.out_dir)
    rows = []
    for family in args.family or bench.families:
        settings, modes = settings_for(bench, family, device)
        cases = family_cases(params, family)
        print(f"{family}: {len(cases)} models on {device} ({settings.dtype}, compile {settings.compile})",
              file=sys.stderr)
        rows += measure_family(cases, settings, modes, log=lambda msg: print(msg, file=sys.stderr))
    ratios = compute_ratios(rows, device.type)
    write_csv_atomic(out_dir / CSV_NAME, SCHEMA, rows)
    write_csv_atomic(out_dir / RATIOS_NAME, RATIO_SCHEMA, ratios)
    print(f"wrote {out_dir / CSV_NAME} ({len(rows)} rows) and {out_dir / RATIOS_NAME} ({len(ratios)} ratios)")
    return 0
