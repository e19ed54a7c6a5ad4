"""Part `vit_ddp`: ViT training throughput under DDP on every GPU of the node, as gka-paper
measured Table 4's training columns (bench/ddp_vit.py: one process per GPU, NCCL, bf16 autocast
and torch.compile as params.yaml's bench section sets them), beside the `models` part's
single-GPU inference.

Full: DeiT-Ti, GKA-Ti and VLT-Ti at 224 px (bench.paper_vit_sizes of the paper scale) at
bench.train_batches images per GPU (the paper: 64 and 128). Tiny (always on a CPU): the micro
scale's ViT at 2 images per rank on 2 gloo ranks, in seconds. Writes vit_ddp.csv, one row per
model, batch and rank: the rank's own img/s and peak memory, and the run's total img/s. The
part fails when the ranks end with different weights (DDP did not average the gradients).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from torch.multiprocessing.spawn import ProcessException

from ..bench import ddp_vit
from ..config import load_params
from .common import Context, PartResult, write_csv

CSV_NAME = "vit_ddp.csv"
TINY = {"scale": "micro", "size": "small", "sizes": (), "batches": (2,), "dtype": "float32", "compile": False,
        "warmup": 1, "reps": 2}


def job_for(ctx: Context, out: Path) -> ddp_vit.Job:
    """The paper scale's bench settings at 224 px on CUDA; the micro ViT at batch 2 on a CPU."""
    if ctx.tiny:
        return ddp_vit.Job(params=ctx.params, device=ctx.device.type, out=str(out), **TINY)
    bench = load_params(ctx.params, "paper").bench
    return ddp_vit.Job(params=ctx.params, scale="paper", size="paper", sizes=bench.paper_vit_sizes,
                       batches=bench.train_batches, device=ctx.device.type, dtype=bench.dtype,
                       compile=bench.compile, warmup=bench.warmup, reps=bench.reps, out=str(out))


def ranks_of(ctx: Context) -> int:
    """Every GPU of the node, or 2 gloo processes on a CPU."""
    return torch.cuda.device_count() if ctx.is_gpu else 2


def summary(rows: list[dict]) -> list[str]:
    """One line per model and batch: ranks, img/s per GPU and in total, the largest rank's
    peak memory, and the total against DeiT's at the same batch."""
    lines = ["| model | shape | batch per GPU | ranks | img/s per GPU | img/s total | vs DeiT | peak MiB (max rank) | ranks in sync |",
             "|---|---|---|---|---|---|---|---|---|"]
    first = {(r["model"], r["batch"]): r for r in rows if r["rank"] == 0}
    for (model, batch), r in first.items():
        group = [x for x in rows if x["model"] == model and x["batch"] == batch]
        base = first.get((r["baseline"], batch))
        vs = f"{r['items_per_s_total'] / base['items_per_s_total']:.2f}x" if base else "-"
        lines.append(f"| {model} | {r['shape']} | {batch} | {r['ranks']} ({r['backend']}) | "
                     f"{r['items_per_s_total'] / r['ranks']:,.1f} | {r['items_per_s_total']:,.1f} | {vs} | "
                     f"{max(x['peak_mib'] for x in group):,.1f} | {'yes' if r['in_sync'] else 'NO'} |")
    return lines


def run_part(ctx: Context, log) -> PartResult:
    work = Path(tempfile.mkdtemp(prefix="kernattn-vit-ddp-"))
    failed = None
    try:
        job, ranks = job_for(ctx, work / "rows.json"), ranks_of(ctx)
        log(f"vit_ddp: {ranks} rank(s) on {ctx.device.type}, batches {job.batches} per rank")
        rows = ddp_vit.run(job, ranks)
    except ProcessException as exc:  # a rank raised or died; torch.multiprocessing ended the others
        own = {r: ddp_vit.error_file(job, r).read_text() for r in range(ranks) if ddp_vit.error_file(job, r).is_file()}
        own = own or {exc.error_index: str(exc).strip().splitlines()[-1][:200]}
        rows, failed = [], "; ".join(f"rank {r} failed: {msg}" for r, msg in sorted(own.items()))
        log(f"vit_ddp: {failed}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = PartResult("vit_ddp", ok=bool(rows) and all(r["in_sync"] for r in rows))
    result.files.append(write_csv(ctx, CSV_NAME, ddp_vit.SCHEMA, rows))
    result.lines += [failed] if failed else summary(rows)
    return result
