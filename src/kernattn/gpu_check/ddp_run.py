"""Part `ddp`: the engine's data parallelism on this machine's devices, through the very command
a user runs (`kernattn train --run <row>-s0 --nproc N`, torchrun --standalone), against one
process training the same optimisation.

The two runs share the global batch and the micro-batch (global / N): one rank accumulates N
micro-batches a step, N ranks one each, so both train the same steps on the same data. On a
node with N >= 2 GPUs (NCCL, bf16 and torch.compile as params.yaml's gpucheck scale sets them)
this checks what the suite cannot (tests/test_ddp*.py run gloo on CPU): the NCCL group, one
GPU per rank, and the scaling of training throughput (tokens/s of N ranks over one rank's).
Under bf16 the two runs' reduction orders differ, so their validation losses agree to a
tolerance, not bit for bit. On a CPU (--tiny) it runs 2 gloo ranks at the micro model, where
float32 must agree closely. On a node with one GPU there is nothing to check: the part says
so in its row (status "not run") and passes, as there is no failure to report.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
import yaml

from ..bench.timing import device_name
from ..config import load_params
from ..errors import UsageError
from ..tracks.char import stages as char_stages
from ..yaml_text import safe_load
from . import train_run
from .common import Context, PartResult, write_csv

CSV_NAME = "ddp.csv"
SCHEMA = {"run": str, "ranks": int, "backend": str, "steps": int, "global_batch": int, "micro_batch": int,
          "val_loss_one": float, "val_loss_many": float, "max_val_diff": float, "tolerance": float,
          "tokens_per_s_one": float, "tokens_per_s_many": float, "speedup": float, "efficiency": float,
          "wall_s": float, "status": str, "device": str}
# The losses of the two runs: float32 on CPU differs by summation order only; bf16 on GPUs by
# the gradients' rounding in another order, which 24 steps carry into the loss's third digit.
TOLERANCE = {"cpu": 1e-4, "cuda": 5e-2}
TINY_STEPS = {"max_steps": 6, "warmup_steps": 2, "eval_every": 3, "eval_batches": 2, "checkpoint_every": 3,
              "budgets": []}  # one run each, no budget sweep


def blank(**fields) -> dict:
    """A CSV row with every column: what was not measured is NaN (numbers), -1 (counts) or ""."""
    empty = {float: float("nan"), int: -1, str: ""}
    return {**{k: empty[t] for k, t in SCHEMA.items()}, **fields}


def world_size(ctx: Context) -> int:
    """The ranks to run: every GPU of the node, or 2 gloo processes on a CPU."""
    return torch.cuda.device_count() if ctx.is_gpu else 2


def write_params(ctx: Context, work: Path, ranks: int) -> Path:
    """The train part's gpucheck scale with the micro-batch both runs share (global / ranks)."""
    work.mkdir(parents=True, exist_ok=True)
    path = train_run.write_params(ctx, work)
    doc = safe_load(path.read_text())
    train = doc["scales"][train_run.SCALE]["train"]
    if ctx.tiny:
        train.update(TINY_STEPS)
    batch = load_params(path, train_run.SCALE).train.batch_size
    if batch % ranks:
        raise UsageError(f"ddp part: train.batch_size {batch} of the gpucheck scale is not divisible by "
                         f"{ranks} ranks; run on a node whose GPU count divides it")
    train["micro_batch"] = batch // ranks
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run_dir_result(params_path: Path, run_id: str) -> tuple[list[float], float]:
    params = load_params(params_path, train_run.SCALE)
    run_dir = char_stages.run_dir(params, run_id)
    final = json.loads((run_dir / "final.json").read_text())
    return train_run.val_losses(run_dir / "metrics.jsonl"), float(final.get("tokens_per_s", float("nan")))


def compare(ctx: Context, work: Path, ranks: int, log) -> dict:
    """Train the first train row on 1 rank and on `ranks` ranks; one CSV row."""
    row = ctx.train_rows[0]
    run_id = f"{row}-s0"
    paths = {n: write_params(ctx, work / f"ranks{n}", ranks) for n in (1, ranks)}
    timeout = train_run.RUN_TIMEOUT_S[ctx.tiny]
    t0 = time.monotonic()
    out = blank(run=run_id, ranks=ranks, backend="nccl" if ctx.is_gpu else "gloo",
                device=device_name(ctx.device), status="failed")
    for n, path in paths.items():
        code = train_run.run_logged(train_run.cli_command("prepare", "--params", str(path)), path.parent / "prepare.log", timeout)
        cmd = train_run.cli_command("train", "--params", str(path), "--run", run_id, "--no-progress",
                             *(("--nproc", str(n)) if n > 1 else ()))
        code = code or train_run.run_logged(cmd, path.parent / "train.log", timeout)
        if code != 0:
            tail = (path.parent / "train.log").read_text(errors="replace").strip().splitlines()[-1:] \
                if (path.parent / "train.log").exists() else []
            out["status"] = f"exit {code} on {n} rank(s): {tail[0][:160] if tail else 'no output'}"
            log(f"ddp: {out['status']}")
            return out
    params = load_params(paths[1], train_run.SCALE).train
    (one, tps_one), (many, tps_many) = (_run_dir_result(paths[n], run_id) for n in (1, ranks))
    diff = max((abs(a - b) for a, b in zip(one, many)), default=float("nan"))
    tol = TOLERANCE[ctx.device.type]
    out.update(steps=params.max_steps, global_batch=params.batch_size, micro_batch=params.batch_size // ranks,
               val_loss_one=one[-1], val_loss_many=many[-1], max_val_diff=diff, tolerance=tol,
               tokens_per_s_one=tps_one, tokens_per_s_many=tps_many, speedup=tps_many / tps_one,
               efficiency=tps_many / tps_one / ranks, wall_s=time.monotonic() - t0)
    out["status"] = "ok" if len(one) == len(many) and len(one) >= 2 and diff <= tol else "failed"
    return out


def run_part(ctx: Context, log) -> PartResult:
    ranks = world_size(ctx)
    if ranks < 2:
        rows = [blank(run=f"{ctx.train_rows[0]}-s0", ranks=ranks, backend="nccl", device=device_name(ctx.device),
                      status=f"not run: {ranks} GPU on this node; the part needs 2 or more")]
    else:
        work = Path(ctx.work_dir) / "ddp" if ctx.work_dir else Path(tempfile.mkdtemp(prefix="kernattn-gpu-ddp-"))
        work.mkdir(parents=True, exist_ok=True)
        try:
            rows = [compare(ctx, work, ranks, log)]
        finally:
            if not ctx.work_dir:
                shutil.rmtree(work, ignore_errors=True)
    result = PartResult("ddp", ok=all(r["status"] == "ok" or r["status"].startswith("not run") for r in rows))
    result.files.append(write_csv(ctx, CSV_NAME, SCHEMA, rows))
    result.lines += ["| run | ranks | val loss 1 rank / N ranks (max diff, tol) | tokens/s 1 / N (speed-up, efficiency) | status |",
                     "|---|---|---|---|---|"]
    for r in rows:
        if r["max_val_diff"] == r["max_val_diff"]:  # measured (not NaN)
            loss = f"{r['val_loss_one']:.4f} / {r['val_loss_many']:.4f} ({r['max_val_diff']:.2g}, {r['tolerance']:g})"
            rate = (f"{r['tokens_per_s_one']:,.0f} / {r['tokens_per_s_many']:,.0f} "
                    f"({r['speedup']:.2f}x, {r['efficiency']:.0%})")
        else:
            loss = rate = "-"
        result.lines.append(f"| {r['run']} | {r['ranks']} ({r['backend']}) | {loss} | {rate} | {r['status']} |")
    return result
