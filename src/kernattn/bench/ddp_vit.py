"""ViT training throughput under data parallelism, as gka-paper measures Table 4's training
columns: DeiT, GKA and VLT trained with PyTorch DDP on every GPU of a node, at a fixed batch
per GPU (the paper: 64 and 128), bf16 autocast and torch.compile on CUDA.

    rows = run(Job(...), ranks=torch.cuda.device_count())

One process per device, started with torch.multiprocessing: spawned on CUDA; on a CPU forked
from Python's fork server, which imports torch, timm and this module once and never trains
(a rank forked from the parent could not run a backward pass once the parent has: autograd's
threads; `gpu-check --part all` trains in the parent before this part). The ranks get the
parent's environment as it is at the start (the fork server's would be older), meeting in the
engine's process group (engine/dist.py: NCCL on CUDA, gloo on CPU). Each rank
trains the same model on its own share of a global batch of `batch` x ranks images (shard
r of the batch, as the engine splits one), so DDP's averaged gradient is the global batch's.
Per rank and per step the time is taken as `kernattn bench` takes it (bench.timing); a
data-parallel step is as fast as its slowest rank, so the total throughput is the global
batch over the median, across steps, of the slowest rank's time. Peak memory is each rank's
own (weights, AdamW state and the step's high-water mark, as bench.models counts it).
After the timed steps every rank hashes its weights: DDP keeps them bit-identical, so ranks
that differ mean the gradients were not averaged (`in_sync` false).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..engine.dist import World, device_of, gather, process_group, shard
from ..io import atomic_write_json
from ..tracking.server import free_port
from .models import Case, Settings, held_bytes, quartiles, step_fn
from .stage import DTYPES
from .timing import device_name, peak_bytes, time_step, utc_timestamp

SCHEMA = {
    "model": str, "baseline": str, "variant": str, "shape": str, "batch": int, "global_batch": int,
    "ranks": int, "rank": int, "backend": str, "items_per_s": float, "items_per_s_total": float,
    "step_ms": float, "step_ms_iqr": float, "reps": int, "peak_mib": float, "params": int, "in_sync": bool,
    "status": str, "device": str, "dtype": str, "torch": str, "compile": bool, "timestamp": str,
}


@dataclass(frozen=True)
class Job:
    """What every rank measures (plain values: it is pickled to the spawned ranks)."""
    params: str                       # params.yaml
    scale: str                        # its scale: the vision section of "small" cases
    size: str                         # "paper": the ViTs of `sizes` at 224 px; "small": the scale's ViT
    sizes: tuple[str, ...]            # of Ti, S, B (size "paper")
    batches: tuple[int, ...]          # images per rank and step
    device: str                       # "cuda" or "cpu"
    dtype: str = "float32"            # bfloat16: autocast (CUDA)
    compile: bool = False
    warmup: int = 3
    reps: int = 10
    out: str = "ddp_vit.json"         # rank 0 writes every rank's rows here
    timeout_s: float = 600.0          # a collective waiting longer (a rank died) raises


def run(job: Job, ranks: int) -> list[dict]:
    """Start `ranks` processes, wait for them, and return every rank's rows (CSV schema)."""
    from torch import multiprocessing

    if job.device == "cuda":
        method = "spawn"
    else:
        method = "forkserver"
        multiprocessing.set_forkserver_preload(["torch", "timm", __name__])  # read when the server starts
    multiprocessing.start_processes(_rank_main, args=(job, ranks, free_port(), dict(os.environ)), nprocs=ranks,
                                    join=True, start_method=method)
    return combine(json.loads(Path(job.out).read_text()))


def error_file(job: Job, rank: int) -> Path:
    """Where rank `rank` leaves its own error: torch.multiprocessing reports whichever rank it
    finds dead first, often a peer's 'connection closed' rather than the rank that failed."""
    return Path(f"{job.out}.error-{rank}")


def _rank_main(rank: int, job: Job, ranks: int, port: int, env: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)
    try:
        _rank_body(rank, job, ranks, port)
    except BaseException as exc:
        last = (str(exc).strip().splitlines() or [""])[-1][:200]
        error_file(job, rank).write_text(f"{type(exc).__name__}: {last}")
        raise


FAIL_ENV = "KERNATTN_DEBUG_FAIL_RANK"  # tests: =R makes rank R raise before its first measurement


def _rank_body(rank: int, job: Job, ranks: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    world = World(rank, ranks, rank)
    device = device_of(world, torch.device(job.device))
    if device.type == "cpu":  # the node's cores shared by its ranks, as torchrun's OMP_NUM_THREADS does
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))
    with process_group(world, device, job.timeout_s):
        if os.environ.get(FAIL_ENV) == str(rank):
            raise RuntimeError(f"rank {rank} failed on purpose ({FAIL_ENV})")
        rows = [measure(case, batch, job, world, device) for batch in job.batches for case in cases_of(job)]
        every = gather(rows, world)
    if world.main:
        atomic_write_json(job.out, [row for rank_rows in every for row in rank_rows])


def cases_of(job: Job) -> list[Case]:
    from ..config import load_params
    from .cases import vit_cases

    params = load_params(job.params, job.scale)
    return vit_cases(params, job.size, job.sizes if job.size == "paper" else None)


def rank_inputs(case: Case, batch: int, world: World, device: torch.device) -> tuple:
    """This rank's share of a global batch of batch x ranks (the same draw on every rank)."""
    images, labels = case.batch(batch * world.size, torch.device("cpu"))
    return shard(images, 0, world, 1).to(device), shard(labels, 0, world, 1).to(device)


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes, in order: equal digests, bit-identical weights."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _wrap(model: torch.nn.Module, world: World, device: torch.device) -> torch.nn.Module:
    if world.size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    # the gradients are views of DDP's buckets: no second copy, and held_bytes counts them once
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                   gradient_as_bucket_view=True)


def measure(case: Case, batch: int, job: Job, world: World, device: torch.device) -> dict:
    """One rank's row for one model at one batch per rank: its step times (combined later)."""
    settings = Settings(device=device, dtype=DTYPES[job.dtype] if device.type == "cuda" else torch.float32,
                        compile=job.compile and device.type == "cuda")
    torch.manual_seed(0)  # DDP broadcasts rank 0's weights anyway; the same seed keeps it a no-op
    model = case.build().to(device).train()
    net = _wrap(model, world, device)
    runner = torch.compile(net) if settings.compile else net
    step, optimizer = step_fn(case, runner, rank_inputs(case, batch, world, device), "train", settings)
    for _ in range(job.warmup):
        step()
    times = [time_step(step, device) for _ in range(job.reps)]
    peak = held_bytes(model, optimizer) + peak_bytes(step, device)
    row = {"model": case.model, "baseline": case.baseline or "", "variant": case.variant, "shape": case.shape,
           "batch": batch, "global_batch": batch * world.size, "ranks": world.size, "rank": world.rank,
           "backend": ("nccl" if device.type == "cuda" else "gloo") if world.size > 1 else "none",
           "times_ms": times, "peak_mib": peak / 2**20, "params": sum(p.numel() for p in model.parameters()),
           "digest": weights_digest(model), "status": "ok", "device": device_name(device),
           "dtype": str(settings.dtype).removeprefix("torch."), "torch": torch.__version__,
           "compile": settings.compile, "timestamp": utc_timestamp()}
    del model, net, runner, step, optimizer  # the next case's memory is measured without this one
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    return row


def combine(rows: list[dict]) -> list[dict]:
    """Every rank's row of a (model, batch) completed with the run's totals: the slowest
    rank's time per step, its median and IQR, the global batch over that median, and whether
    every rank ended with the same weights. Per-rank img/s is the rank's own median."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["batch"]), []).append(row)
    out = []
    for group in groups.values():
        group.sort(key=lambda r: r["rank"])
        slowest = [max(step) for step in zip(*(r["times_ms"] for r in group))]
        median, iqr = quartiles(slowest)
        in_sync = len({r["digest"] for r in group}) == 1 and len(group) == group[0]["ranks"]
        for r in group:
            own, _ = quartiles(r["times_ms"])
            done = {k: v for k, v in r.items() if k not in ("times_ms", "digest")}
            out.append({**done, "items_per_s": r["batch"] / (own / 1e3), "step_ms": median, "step_ms_iqr": iqr,
                        "items_per_s_total": r["global_batch"] / (median / 1e3), "reps": len(slowest),
                        "in_sync": in_sync})
    return out
