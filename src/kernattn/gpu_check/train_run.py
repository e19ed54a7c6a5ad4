"""Part `train`: a few minutes of the paper-scale char run (static RoPE and GPA + RoPE, bf16,
torch.compile, batch 256 x 256 on CUDA) through the very `kernattn train` command the pipeline
runs (`python -m kernattn.cli train --params <generated> --run <row>-s0`), killed once with
SIGKILL after its first checkpoint and rerun, which must resume from that checkpoint.

The generated params file (in the work folder) is params.yaml with one more scale,
`gpucheck`: the paper scale (full) or the micro scale (tiny) with a short schedule, the
char corpus read from a local file (a GPU node has no internet; default: params.yaml's tiny
mirror, or --corpus), MLflow off (a bare node has none) and every output in the work folder
(a temporary one unless --work-dir; checkpoints never land in results/gpu/).
Recorded per run: the validation loss at step 0 and at the end (it must fall), the step the
kill came after and the step the rerun resumed from (config.json's resumed_from_step, which
must equal the last checkpoint's), tokens/s of pure training (final.json) and MFU = tokens/s x
FLOPs/token (FlopCounterMode, kernattn.bench.models.count_flops) / the GPU's dense bf16 peak.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from ..bench.timing import device_name
from ..bench.cases import char_gpt_cases
from ..bench.models import count_flops, peak_flops
from ..config import load_params
from ..errors import UsageError
from ..tracks.char import stages as char_stages
from ..yaml_text import safe_load
from .common import Context, PartResult, write_csv

SCALE = "gpucheck"
CSV_NAME = "train.csv"
SCHEMA = {"run": str, "steps": int, "killed_after_step": int, "resumed_from_step": int, "checkpoint_every": int,
          "first_val_loss": float, "last_val_loss": float, "loss_fell": bool, "resumed_ok": bool,
          "tokens_per_s": float, "flops_per_token": float, "mfu": float, "wall_s": float, "dtype": str,
          "compile": bool, "status": str, "device": str}
# A short schedule: full ~2,000 steps of 65,536 tokens; tiny ~24 steps of the micro model.
# one run, no budget sweep (train.budgets: the micro scale's own branch point would not fit these lengths)
FULL_TRAIN = {"max_steps": 2000, "warmup_steps": 200, "eval_every": 500, "eval_batches": 10, "checkpoint_every": 500,
              "budgets": []}
TINY_TRAIN = {"max_steps": 24, "warmup_steps": 4, "eval_every": 8, "eval_batches": 2, "checkpoint_every": 8,
              "budgets": []}
RUN_TIMEOUT_S = {True: 300, False: 420}  # per command, tiny / full


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def corpus_path(ctx: Context, doc: dict) -> Path:
    """--corpus, else the tiny scale's data set, from the data mirror or the cache (a GPU node may
    have no network: nothing is downloaded here)."""
    chosen = ctx.corpus
    if not chosen:
        from ..datasets import Where, dataset, locate
        from ..fetch import DataError

        tiny = ((doc.get("scales") or {}).get("tiny") or {}).get("data") or {}
        try:
            chosen = str(locate(dataset(tiny.get("dataset") or "silesia-dickens").files[0], Where.from_params(),
                                download=False))
        except DataError as exc:
            raise UsageError(f"train part: {exc}; or pass --corpus PATH (a .txt or .txt.gz)") from None
    if not Path(chosen).is_file():
        raise UsageError(f"train part: the char corpus {chosen!r} is not a file; pass --corpus PATH "
                         f"(a .txt or .txt.gz)")
    return Path(chosen).resolve()


def write_params(ctx: Context, work: Path) -> Path:
    """params.yaml plus the `gpucheck` scale; returns the generated file's path."""
    doc = safe_load(Path(ctx.params).read_text())
    base = ((doc.get("scales") or {}).get("micro") or {}) if ctx.tiny else {}
    train = {**(TINY_TRAIN if ctx.tiny else FULL_TRAIN), "out_dir": str(work / "runs"),
             "device": "auto" if ctx.is_gpu else "cpu"}
    overrides = {"data": {"mirror": str(corpus_path(ctx, doc)), "out_dir": str(work / "data")},
                 "train": train, "matrix": {"seeds": [0], "only": list(ctx.train_rows)}, "tracking": {"enabled": False}}
    doc["scales"] = {**(doc.get("scales") or {}), SCALE: _merge(base, overrides)}
    doc["scale"] = SCALE
    path = work / "params.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cli_command(*args: str) -> list[str]:
    """The `kernattn` command line a user runs, in this interpreter (so a rank runs this install)."""
    return [sys.executable, "-m", "kernattn.cli", *args]


def _last_step(metrics: Path) -> int:
    try:
        lines = metrics.read_text().splitlines()
    except FileNotFoundError:
        return -1
    steps = [json.loads(line).get("step", -1) for line in lines if line.strip().startswith("{")]
    return max(steps, default=-1)


def kill_once(cmd: list[str], run_dir: Path, hold_at: int, log_path: Path, timeout: float) -> int:
    """Start the run, SIGKILL it once it has passed `hold_at` (after a checkpoint); the step killed
    after, or -1 when it ended first. KERNATTN_DEBUG_HOLD_AT_STEP makes it wait there."""
    env = {**os.environ, "KERNATTN_DEBUG_HOLD_AT_STEP": str(hold_at)}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            step = _last_step(run_dir / "metrics.jsonl")
            if step >= hold_at or b"holding after step" in log_path.read_bytes():
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return max(step, hold_at)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return -1


def val_losses(metrics: Path) -> list[float]:
    """The validation losses of a run's metrics.jsonl, in step order."""
    lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip().startswith("{")]
    return [x["loss"] for x in lines if x.get("split") == "val" and "loss" in x]


def run_logged(cmd: list[str], log_path: Path, timeout: float) -> int:
    """Exit status of `cmd` run to the end with its output appended to `log_path`; 124 past `timeout` s."""
    with open(log_path, "ab") as log:
        try:
            return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def train_row(ctx: Context, params_path: Path, row: str, kill: bool) -> dict:
    """One run through the CLI: killed once after its first checkpoint (when `kill`), then rerun to the end."""
    params = load_params(params_path, SCALE)
    tp = params.train
    run_id = f"{row}-s0"
    run_dir = char_stages.run_dir(params, run_id)
    log_path = run_dir.parent / f"{run_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = cli_command("train", "--params", str(params_path), "--run", run_id, "--no-progress")
    timeout = RUN_TIMEOUT_S[ctx.tiny]
    t0 = time.monotonic()
    killed = kill_once(cmd, run_dir, tp.checkpoint_every + max(1, tp.checkpoint_every // 2), log_path, timeout) \
        if kill else -1
    code = run_logged(cmd, log_path, timeout)
    wall = time.monotonic() - t0
    row_out = {"run": run_id, "steps": tp.max_steps, "killed_after_step": killed, "checkpoint_every": tp.checkpoint_every,
               "wall_s": wall, "dtype": "bfloat16" if ctx.is_gpu else "float32", "compile": ctx.is_gpu and tp.compile,
               "device": device_name(ctx.device), "resumed_from_step": -1, "first_val_loss": float("nan"),
               "last_val_loss": float("nan"), "loss_fell": False, "resumed_ok": not kill,
               "tokens_per_s": float("nan"), "flops_per_token": float("nan"), "mfu": float("nan")}
    final_path = run_dir / "final.json"
    if code != 0 or not final_path.is_file():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
        row_out["status"] = f"exit {code}: {tail[0][:160] if tail else 'no output'}"
        return row_out
    config = json.loads((run_dir / "config.json").read_text())
    final = json.loads(final_path.read_text())
    losses = val_losses(run_dir / "metrics.jsonl")
    resumed = config.get("resumed_from_step")
    row_out["resumed_from_step"] = -1 if resumed is None else int(resumed)
    if kill:  # the rerun must start from the last checkpoint before the kill, not from scratch
        ce = tp.checkpoint_every
        row_out["resumed_ok"] = killed > 0 and resumed is not None and 0 < resumed <= killed and resumed % ce == 0
    row_out.update(first_val_loss=losses[0] if losses else float("nan"),
                   last_val_loss=losses[-1] if losses else float("nan"),
                   loss_fell=len(losses) >= 2 and losses[-1] < losses[0],
                   tokens_per_s=float(final.get("tokens_per_s", float("nan"))))
    row_out["flops_per_token"] = _flops_per_token(params, row, ctx.device)
    peak = peak_flops(ctx.device, torch.bfloat16)
    if peak:
        row_out["mfu"] = row_out["tokens_per_s"] * row_out["flops_per_token"] / peak
    row_out["status"] = "ok" if row_out["loss_fell"] and row_out["resumed_ok"] else "failed"
    return row_out


def _flops_per_token(params, row: str, device: torch.device) -> float:
    """Training FLOPs per token of the run's model, counted as `kernattn bench` counts them."""
    case = char_gpt_cases(params, (row,), "small")[0]  # "small": this scale's own model section
    return count_flops(case, "train", device) / case.items_per_sample


def run_part(ctx: Context, log) -> PartResult:
    work = Path(ctx.work_dir) if ctx.work_dir else Path(tempfile.mkdtemp(prefix="kernattn-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        params_path = write_params(ctx, work)
        code = run_logged(cli_command("prepare", "--params", str(params_path)), work / "prepare.log", RUN_TIMEOUT_S[ctx.tiny])
        if code != 0:
            raise UsageError(f"train part: `kernattn prepare` failed (exit {code}); see {work / 'prepare.log'}"
                             + ("" if ctx.work_dir else " (pass --work-dir to keep it)"))
        rows = []
        for i, row in enumerate(ctx.train_rows):
            rows.append(train_row(ctx, params_path, row, kill=i == 0))
            log(f"train: {rows[-1]['run']}: {rows[-1]['status']}")
    finally:
        if not ctx.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    result = PartResult("train", ok=all(r["status"] == "ok" for r in rows))
    result.files.append(write_csv(ctx, CSV_NAME, SCHEMA, rows))
    result.lines += ["| run | val loss start -> end | killed after / resumed from | tokens/s | MFU | status |",
                     "|---|---|---|---|---|---|"]
    for r in rows:
        kill = f"{r['killed_after_step']} / {r['resumed_from_step']}" if r["killed_after_step"] >= 0 else "-"
        mfu = f"{r['mfu']:.1%}" if r["mfu"] == r["mfu"] else "-"
        result.lines.append(f"| {r['run']} | {r['first_val_loss']:.3f} -> {r['last_val_loss']:.3f} | {kill} | "
                            f"{r['tokens_per_s']:,.0f} | {mfu} | {r['status']} |")
    return result
