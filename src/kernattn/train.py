"""Train one run of the experiment matrix: a char-level GPT with the run's attention variant.

    kernattn train --params params.yaml [--scale S] --run <run_id> [--fresh]

<run_id> is '<row>-s<seed>' from params.yaml's matrix (e.g. rope-s0). Reads the prepared
corpus (data.out_dir: train.npy, val.npy as uint8 token ids, vocab.json) and writes the run
folder train.out_dir/<run_id>/:

  config.json    the resolved configuration (scale, run spec, model, train, data, params
                 digest, fingerprint, git commit, torch version, device, parameter counts,
                 MLflow run id); rewritten at the start of every session
  metrics.jsonl  one JSON object per line, flushed per line:
                 {"step", "split": "train"|"val", "loss", "bpc", "lr", "tokens", "elapsed_s",
                  "tokens_per_s"}
                 val lines at step 0, every eval_every steps and at max_steps; train lines
                 every max(1, eval_every // 10) steps and at max_steps, with `loss` the mean
                 training loss over the steps since the previous train line
  ckpt.pt        every checkpoint_every steps and at the end (temp file + os.replace)
  final.json     written LAST (atomically): the stage's declared output (FINAL_KEYS)

Definitions: loss = mean cross-entropy in nats per character; bpc = loss / ln 2; tokens =
step x batch_size x context (training tokens seen); elapsed_s = wall seconds of training and
evaluation summed over sessions (set-up excluded); tokens_per_s = training tokens per second
of pure training time (evaluation excluded): over the last interval on train lines, the run
average on val lines (0 at step 0).

Training: AdamW (beta1, beta2; weight decay on nn.Linear weights only, see
GPT.param_groups), lr linear warmup over warmup_steps then cosine decay to lr x min_lr_ratio
at max_steps, gradient-norm clipping at grad_clip (0: off). CPU: float32, eager, threads from
train.threads. CUDA (device auto picks it when available): bf16 autocast (train.dtype) and
torch.compile (train.compile), fused AdamW.

Randomness: torch, numpy and python `random` are seeded with the run's seed before the model
is built (so the init depends on the seed only); training batches are random windows of
context + 1 characters of train.npy drawn by their own torch.Generator (seed derived from the
run's seed); validation uses eval_batches x batch_size fixed windows of val.npy drawn once by
a generator with a constant seed (VAL_SEED), so every eval of every run (all rows, all seeds)
scores the very same characters.

Resume: rerunning the command when ckpt.pt exists (and final.json does not) continues from
it: model, optimizer, step, every RNG state (incl. the batch generator), the running training
loss and the metrics line count (metrics.jsonl is cut back to the checkpoint). On CPU a
resumed run is bit-exact with an uninterrupted one. A checkpoint written under another
configuration (its fingerprint: model, train except out_dir / checkpoint_every / threads /
compile / device, the run spec and the data digest) is refused; --fresh deletes the run folder
first. When final.json exists with the same fingerprint the command does nothing. SIGTERM
(e.g. a SLURM preemption) ends the current step, saves a checkpoint and exits with 143.
A SIGKILL at any moment loses at most the steps since the last checkpoint: the checkpoint is
replaced atomically, metrics.jsonl lines are appended whole (kernattn.io.LineAppender) and
fsync'ed before the checkpoint that counts them, and the rerun cuts the lines past it.
KERNATTN_DEBUG_HOLD_AT_STEP=N (tests) makes the process wait after step N until it is
killed or gets SIGTERM, so a crash can be placed at a known step.

Divergence: a training loss that is nan or inf (its first step is tracked on the device, read
at every train line, eval and checkpoint), a non-finite validation loss, or non-finite
weights at a checkpoint stop the run: one line on stderr naming the step and the checkpoint
kept ("kernattn train: error: <run>: step N: training loss is nan; training stopped, the last
good checkpoint (step M) is kept at ...; lower train.lr ..."), exit status 3 (EXIT_DIVERGED),
a last metrics.jsonl line {"step", "status": "FAILED", "error", "checkpoint_step"}, MLflow
status FAILED with a `failure` tag. A checkpoint is never overwritten by non-finite weights.
Checkpoints hold tensors and plain containers only and load with weights_only=True.

MLflow (kernattn.tracking): one MLflow run per run folder (reused on resume), params =
the flattened config, tags (run_id, row, seed, git commit, params digest, scale, ...),
step metrics sent in batches at each eval / checkpoint, artifacts config.json, final.json
and metrics.jsonl at the end; status FINISHED, FAILED on an exception, KILLED on
--stop-after / SIGTERM / Ctrl-C (RUNNING again on resume). Tracking problems print one
warning and never stop training.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .io import (LineAppender, LoadError, atomic_path, atomic_write_json, atomic_write_text, load_torch,
                 read_lines)
from .errors import UsageError
from .config import Params, RunSpec, find_run, load_params

HELP = "train one run of the experiment matrix (resumable; writes <train.out_dir>/<run_id>/)"

CKPT_FORMAT = 1
VAL_SEED = 20240917  # one fixed set of validation windows for every run
CONFIG, METRICS, CKPT, FINAL = "config.json", "metrics.jsonl", "ckpt.pt", "final.json"
FINAL_KEYS = (
    "run_id", "row", "seed", "variant", "options", "label", "source",
    "val_loss", "val_bpc", "train_loss", "n_params", "extra_params", "tokens_seen", "steps",
    "wall_s", "tokens_per_s", "device", "mlflow_run_id", "tracking_uri", "git_commit",
    "params_digest", "scale",
    # beyond the list the pipeline relies on:
    "n_params_non_embedding", "train_s", "fingerprint",
)
METRIC_KEYS = ("step", "split", "loss", "bpc", "lr", "tokens", "elapsed_s", "tokens_per_s")
TIMING_KEYS = ("elapsed_s", "tokens_per_s")
# train.* fields that do not change the trained weights or the metrics: not in the fingerprint.
NOT_FINGERPRINTED = ("out_dir", "checkpoint_every", "threads", "compile", "device")
# config.json sections logged to MLflow as params (flattened).
PARAM_SECTIONS = ("scale", "params_digest", "fingerprint", "run", "model", "train", "data",
                  "n_params", "n_params_non_embedding", "extra_params", "device", "torch_version",
                  "git_commit")
LN2 = math.log(2.0)
HOLD_ENV = "KERNATTN_DEBUG_HOLD_AT_STEP"
EXIT_DIVERGED = 3


# ============================================================================ CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    parser.add_argument("--scale", default=None, help="scale of params.yaml to use (default: the file's `scale`)")
    parser.add_argument("--run", required=True, metavar="RUN_ID",
                        help="run of the matrix, '<row>-s<seed>' (e.g. rope-s0)")
    parser.add_argument("--fresh", action="store_true",
                        help="delete the run folder first (discard a checkpoint or a finished run)")
    parser.add_argument("--stale", choices=("error", "archive"), default="error",
                        help="a run folder from another configuration (params changed): 'error' (default) "
                             "stops with a message; 'archive' moves it to <out_dir>/.stale/ and starts "
                             "fresh (what the Snakefile and dvc.yaml use: they rerun a stage because "
                             "its params changed)")
    # Tests: stop after this many steps with a checkpoint and no final.json.
    parser.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    spec = find_run(params, args.run)
    if args.stop_after is not None and args.stop_after < 0:
        raise UsageError(f"--stop-after must be >= 0, got {args.stop_after}")
    return train(params, spec, fresh=args.fresh, stop_after=args.stop_after,
                 progress=not args.no_progress, stale=args.stale)


# ============================================================================ helpers
def _derive_seed(seed: int, purpose: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{purpose}".encode()).digest()[:8], "little") >> 1


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _atomic_torch_save(path: Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def git_info() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the repository holding this package, or (None, None)."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
        return commit or None, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("train.device is 'cuda' but CUDA is not available here; use device: auto or cpu")
    return torch.device(name)


def lr_at(step: int, tp) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warmup, then cosine to lr x min_lr_ratio."""
    if step < tp.warmup_steps:
        return tp.lr * (step + 1) / tp.warmup_steps
    span = max(1, tp.max_steps - tp.warmup_steps)
    progress = min(1.0, (step - tp.warmup_steps) / span)
    floor = tp.lr * tp.min_lr_ratio
    return floor + 0.5 * (tp.lr - floor) * (1.0 + math.cos(math.pi * progress))


# ============================================================================ data
def load_data(out_dir: str | os.PathLike, context: int) -> SimpleNamespace:
    """train/val uint8 token tensors, vocab size and a digest of the token arrays."""
    root = Path(out_dir)
    arrays = {}
    for split in ("train", "val"):
        path = root / f"{split}.npy"
        if not path.is_file():
            raise UsageError(f"{path}: no such file; prepare the corpus first (kernattn prepare)")
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise UsageError(f"{path}: unreadable token array, truncated or corrupt ({type(exc).__name__}: "
                             f"{first}); rerun kernattn prepare (with the same params) to rewrite it") from None
        if arr.dtype != np.uint8 or arr.ndim != 1:
            raise UsageError(f"{path}: expected a 1-D uint8 array of token ids, got {arr.dtype} {arr.shape}")
        if arr.size < context + 2:
            raise UsageError(f"{path}: {arr.size} tokens, fewer than context + 2 = {context + 2}")
        arrays[split] = arr
    vocab_path = root / "vocab.json"
    try:
        vocab_size = int(json.loads(vocab_path.read_text())["size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{vocab_path}: cannot read the vocabulary size ({exc})") from None
    top = max(int(arrays["train"].max()), int(arrays["val"].max()))
    if top >= vocab_size:
        raise UsageError(f"{root}: token id {top} is outside the vocabulary of size {vocab_size}")
    h = hashlib.sha256()
    for split in ("train", "val"):
        h.update(arrays[split].tobytes())
    return SimpleNamespace(
        train=torch.from_numpy(np.ascontiguousarray(arrays["train"])),
        val=torch.from_numpy(np.ascontiguousarray(arrays["val"])),
        vocab_size=vocab_size, digest=h.hexdigest()[:16], out_dir=str(root),
    )


def windows(data: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of context + 1 tokens at `starts` -> (inputs, next-token targets), int64 [B, context]."""
    offsets = torch.arange(context + 1, device=data.device)
    chunk = data[starts.to(data.device)[:, None] + offsets].long()
    return chunk[:, :-1], chunk[:, 1:]


# ============================================================================ RNG state
def rng_state(batch_gen: torch.Generator) -> dict[str, Any]:
    """Every RNG state as tensors / plain types (loadable with weights_only=True)."""
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": np_state[0], "key": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
        "python": random.getstate(),
        "batch": batch_gen.get_state(),
    }


def set_rng_state(state: dict[str, Any], batch_gen: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    batch_gen.set_state(state["batch"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ============================================================================ config
def fingerprint_config(params: Params, spec: RunSpec, data) -> dict[str, Any]:
    """What a checkpoint must share with the current command to be resumed."""
    train_fields = {k: v for k, v in dataclasses.asdict(params.train).items() if k not in NOT_FINGERPRINTED}
    return {
        "format": CKPT_FORMAT,
        "run": {"run_id": spec.run_id, "variant": spec.variant, "options": spec.options, "seed": spec.seed},
        "model": dataclasses.asdict(params.model),
        "train": train_fields,
        "data": {"vocab_size": data.vocab_size, "train_tokens": int(data.train.numel()),
                 "val_tokens": int(data.val.numel()), "digest": data.digest},
    }


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _differences(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str) \
        else [f"{prefix[:-1]} ({a!r} -> {b!r})"]


def mlflow_params(config: dict[str, Any]) -> dict[str, str]:
    """The MLflow params of a run: config.json's PARAM_SECTIONS, flattened."""
    from .tracking import flatten

    return flatten({k: config.get(k) for k in PARAM_SECTIONS})


def metric_dict(line: dict[str, Any]) -> dict[str, float]:
    """metrics.jsonl line -> MLflow metrics."""
    s = line["split"]
    out = {f"{s}_loss": line["loss"], f"{s}_bpc": line["bpc"]}
    if s == "train":
        out |= {"lr": line["lr"], "tokens_per_s": line["tokens_per_s"]}
    return out


# ============================================================================ training
class _Stop:
    """SIGTERM -> finish the current step, checkpoint, exit 143 (main thread only)."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        return False


CKPT_KEYS = ("format", "fingerprint", "fingerprint_config", "step", "metrics_lines", "model", "optimizer",
             "rng", "train_loss_acc", "train_loss_n", "elapsed_s", "train_s", "last_train", "last_val")


def read_checkpoint(path: Path, fix: str, keys: tuple[str, ...] = CKPT_KEYS) -> dict[str, Any]:
    """A training checkpoint (weights_only=True), checked for the keys a resume needs; any
    problem is a one-line UsageError naming the file and ending with `fix`."""
    try:
        ckpt = load_torch(path, fix)
    except LoadError as exc:
        raise UsageError(str(exc)) from None
    missing = [k for k in keys if k not in ckpt] if isinstance(ckpt, dict) else list(keys)
    if missing:
        raise UsageError(f"{path}: not a kernattn training checkpoint (missing {', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''}); {fix}")
    if "format" in keys and ckpt["format"] != CKPT_FORMAT:
        raise UsageError(f"{path}: checkpoint format {ckpt['format']!r}, this version reads {CKPT_FORMAT}; {fix}")
    return ckpt


class Diverged(Exception):
    """The training (or validation) loss, or the weights, stopped being finite."""

    def __init__(self, step: int, what: str):
        super().__init__(f"step {step}: {what}")
        self.step, self.what = step, what


def all_finite(model: torch.nn.Module) -> bool:
    """Every parameter finite (one sync): checked before a checkpoint overwrites the last one."""
    flags = [torch.isfinite(p).all() for p in model.parameters()]
    return bool(torch.stack(flags).all().item()) if flags else True


def _hold_at_step() -> int | None:
    """KERNATTN_DEBUG_HOLD_AT_STEP=N (tests): after step N the process waits (until SIGTERM or
    SIGKILL) with a line on stderr, so a test can kill a real run at a known step."""
    value = os.environ.get(HOLD_ENV, "").strip()
    return int(value) if value.isdigit() else None


def validation_starts(n_val: int, context: int, eval_batches: int, batch_size: int) -> torch.Tensor:
    """[eval_batches, batch_size] start offsets of the fixed validation windows (VAL_SEED):
    the same characters for every eval of every run, and for the analyses that re-score a
    trained model (kernattn.analysis.heads)."""
    gen = torch.Generator().manual_seed(VAL_SEED)
    return torch.randint(0, n_val - context, (eval_batches, batch_size), generator=gen)


@torch.no_grad()
def evaluate(fwd, model, data: torch.Tensor, starts: torch.Tensor, context: int, autocast) -> float:
    """Mean cross-entropy over the fixed validation windows `starts` [eval_batches, B]."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=data.device)
    for batch in starts:
        x, y = windows(data, batch, context)
        with autocast():
            logits = fwd(x)
        total += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    model.train(was_training)
    return float(total.item()) / len(starts)


def _archive_stale(run_dir: Path, why: str) -> Path:
    """Move a run folder made under other params to <out_dir>/.stale/ (kept, never deleted)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    dest = run_dir.parent / ".stale" / f"{run_dir.name}-{stamp}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run_dir, dest)
    print(f"kernattn: {run_dir} held {why}: moved to {dest}; training from scratch")
    return dest


def open_run_dir(run_dir: Path, fingerprint: str, fp_config: dict, *, stale: str, command: str, run_id: str,
                 variant: str | None = None, keys: tuple[str, ...] = ("fingerprint", "model")
                 ) -> tuple[bool, dict | None]:
    """What a run folder holds for these params, shared by every trainer: (done, checkpoint).

    done: its final.json has this fingerprint (nothing to train). A finished run or a
    checkpoint made under other params is refused with a one-line error (stale="error", the
    default by hand) or moved to <out_dir>/.stale/ (stale="archive", what the pipeline passes):
    never deleted. The checkpoint loads with weights_only=True and must carry `keys`."""
    final_path, ckpt_path = run_dir / FINAL, run_dir / CKPT
    redo = f"rerun with --fresh (or --stale archive) to retrain {run_id}"
    if final_path.is_file():
        try:
            finished = json.loads(final_path.read_text())
        except ValueError:
            finished = {}
        if isinstance(finished, dict) and finished.get("fingerprint") == fingerprint:
            print(f"kernattn {command}: {run_id}: already finished ({final_path}); --fresh retrains it")
            return True, None
        if stale != "archive":
            raise UsageError(f"{final_path}: a finished run from another configuration; {redo}")
        _archive_stale(run_dir, "a finished run from another configuration")
    if not ckpt_path.exists():
        return False, None
    ckpt = read_checkpoint(ckpt_path, f"rerun with --fresh to train {run_id} from scratch", keys)
    if ckpt.get("fingerprint") == fingerprint:
        return False, ckpt
    diff = _differences(ckpt.get("fingerprint_config", {}), fp_config)
    what = "; ".join(diff[:3]) + (" ..." if len(diff) > 3 else "") if diff else "unknown fields"
    theirs = (ckpt.get("fingerprint_config") or {}).get("run") or {}
    if variant and theirs.get("variant") not in (None, variant):  # the most telling difference first
        what = f"a {theirs['variant']!r} model (run {theirs.get('run_id')}), not this run's {variant!r}; " + what
    if stale != "archive":
        raise UsageError(f"{ckpt_path}: checkpoint from another configuration ({what}); {redo}")
    _archive_stale(run_dir, f"a checkpoint from another configuration ({what})")
    return False, None


def train(params: Params, spec: RunSpec, *, fresh: bool = False, stop_after: int | None = None,
          progress: bool = True, stale: str = "error") -> int:
    """Train (or resume, or skip when finished) run `spec`; returns the exit status."""
    from .models import GPT
    from .tracking import Tracker

    tp, mp = params.train, params.model
    run_dir = Path(tp.out_dir) / spec.run_id
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    data = load_data(params.data.out_dir, mp.context)
    fp_config = fingerprint_config(params, spec, data)
    fingerprint = _digest(fp_config)
    ckpt_path, final_path, metrics_path = run_dir / CKPT, run_dir / FINAL, run_dir / METRICS

    done, ckpt = open_run_dir(run_dir, fingerprint, fp_config, stale=stale, command="train", run_id=spec.run_id,
                              variant=spec.variant, keys=CKPT_KEYS)
    if done:
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)

    # ---- device, threads, model, optimizer
    device = resolve_device(tp.device)
    cuda = device.type == "cuda"
    if tp.threads is not None:
        torch.set_num_threads(tp.threads)
    if cuda:
        torch.set_float32_matmul_precision("high")
    seed_everything(spec.seed)
    model = GPT(data.vocab_size, mp, spec.variant, spec.options).to(device)
    optimizer = torch.optim.AdamW(model.param_groups(tp.weight_decay), lr=tp.lr,
                                  betas=(tp.beta1, tp.beta2), **({"fused": True} if cuda else {}))
    fwd = torch.compile(model) if (cuda and tp.compile) else model
    use_bf16 = cuda and tp.dtype == "bfloat16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    batch_gen = torch.Generator().manual_seed(_derive_seed(spec.seed, "batches"))
    val_starts = validation_starts(data.val.numel(), mp.context, tp.eval_batches, tp.batch_size)
    train_data, val_data = data.train.to(device), data.val.to(device)
    n_train_starts = data.train.numel() - mp.context

    # ---- state (fresh or from the checkpoint)
    st = SimpleNamespace(step=0, ckpt_step=None, metrics_lines=0, elapsed_s=0.0, train_s=0.0, acc_n=0,
                         acc=torch.zeros((), dtype=torch.float64, device=device),
                         last_train=None, last_val=None, mlflow_run_id=None)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"], batch_gen)
        st.step, st.metrics_lines = int(ckpt["step"]), int(ckpt["metrics_lines"])
        st.elapsed_s, st.train_s = float(ckpt["elapsed_s"]), float(ckpt["train_s"])
        st.acc, st.acc_n = ckpt["train_loss_acc"].to(device), int(ckpt["train_loss_n"])
        st.last_train, st.last_val = ckpt["last_train"], ckpt["last_val"]
        st.mlflow_run_id = ckpt.get("mlflow_run_id")
        st.ckpt_step = st.step
    kept: list[str] = []
    if metrics_path.is_file():
        kept = read_lines(metrics_path)[: st.metrics_lines] if ckpt is not None else []
    atomic_write_text(metrics_path, "".join(line + "\n" for line in kept))
    st.metrics_lines = len(kept)

    # ---- config.json and MLflow
    commit, dirty = git_info()
    config: dict[str, Any] = {
        "scale": params.scale,
        "params_path": str(params.path),
        "params_digest": params.digest(),
        "fingerprint": fingerprint,
        "run": dataclasses.asdict(spec),
        "model": dataclasses.asdict(mp),
        "train": dataclasses.asdict(tp),
        "data": {"out_dir": data.out_dir, "vocab_size": data.vocab_size,
                 "train_tokens": int(data.train.numel()), "val_tokens": int(data.val.numel()),
                 "digest": data.digest},
        "n_params": model.num_params(),
        "n_params_non_embedding": model.num_params(non_embedding=True),
        "extra_params": model.extra_params(),
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine(),
        "effective": {"dtype": "bfloat16" if use_bf16 else "float32", "compile": fwd is not model,
                      "threads": torch.get_num_threads()},
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "git_commit": commit,
        "git_dirty": dirty,
        "resumed_from_step": st.step if ckpt is not None else None,
    }
    if st.mlflow_run_id is None and ckpt is None and (run_dir / CONFIG).is_file():
        # A session that died before its first checkpoint: reuse its MLflow run (same
        # fingerprint only); the replayed steps it already holds are not logged twice.
        with contextlib.suppress(ValueError, OSError, AttributeError):
            old = json.loads((run_dir / CONFIG).read_text())
            if old.get("fingerprint") == fingerprint:
                st.mlflow_run_id = (old.get("tracking") or {}).get("mlflow_run_id")
    tracker = Tracker(params.tracking)
    tags = {"run_id": spec.run_id, "row": spec.row, "seed": spec.seed, "variant": spec.variant,
            "source": spec.source, "label": spec.label, "git_commit": commit, "params_digest": config["params_digest"],
            "scale": params.scale, "fingerprint": fingerprint, "device": device.type}
    mlflow_run_id = tracker.start(name=spec.run_id, tags=tags, params=mlflow_params(config),
                                  resume_run_id=st.mlflow_run_id)
    if mlflow_run_id is not None:
        st.mlflow_run_id = mlflow_run_id
        for line in kept:  # backfill / dedup: only steps the MLflow run does not have yet
            rec = json.loads(line)
            tracker.log_metrics(metric_dict(rec), rec["step"])
        tracker.flush()
    config["tracking"] = {"enabled": params.tracking.enabled, "uri": params.tracking.uri,
                          "experiment": params.tracking.experiment, "mlflow_run_id": st.mlflow_run_id}
    atomic_write_json(run_dir / CONFIG, config, sort_keys=False)
    print(f"kernattn train: {spec.run_id} ({spec.label}): {config['n_params']:,} params "
          f"({config['n_params_non_embedding']:,} non-embedding, extra {config['extra_params']:+,}), "
          f"device {device.type}, {'resuming at step ' + str(st.step) if ckpt is not None else 'from scratch'}",
          flush=True)

    tokens_per_step = tp.batch_size * mp.context
    log_every = max(1, tp.eval_every // 10)
    metrics_fh = LineAppender(metrics_path)  # a line is complete or absent, whatever kills us

    def write_metrics(rec: dict[str, Any]) -> None:
        metrics_fh.write(json.dumps(rec))
        st.metrics_lines += 1
        tracker.log_metrics(metric_dict(rec), rec["step"])

    def save_checkpoint() -> None:
        check_finite()
        if not all_finite(model):  # never replace the last good checkpoint by broken weights
            raise Diverged(st.step, "the weights are no longer finite")
        metrics_fh.fsync()  # the lines the checkpoint counts are on disk before it is
        _atomic_torch_save(ckpt_path, {
            "format": CKPT_FORMAT, "fingerprint": fingerprint, "fingerprint_config": fp_config,
            "step": st.step, "metrics_lines": st.metrics_lines,
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state(batch_gen),
            "train_loss_acc": st.acc.detach().cpu(), "train_loss_n": st.acc_n,
            "elapsed_s": st.elapsed_s, "train_s": st.train_s,
            "last_train": st.last_train, "last_val": st.last_val, "mlflow_run_id": st.mlflow_run_id,
        })
        tracker.flush()
        st.ckpt_step = st.step

    # First non-finite training loss: its step and value, kept on the device (no sync per
    # step); read whenever the loop syncs anyway (train lines, evals, checkpoints).
    bad_step = torch.full((), -1, dtype=torch.long, device=device)
    bad_value = torch.zeros((), dtype=torch.float32, device=device)

    def check_finite() -> None:
        step = int(bad_step.item())
        if step >= 0:
            raise Diverged(step, f"training loss is {float(bad_value.item())}")

    hold_at = _hold_at_step()
    bar = None
    status = "FAILED"
    try:
        from tqdm.auto import tqdm

        tty = sys.stderr.isatty()
        bar = tqdm(total=tp.max_steps, initial=st.step, desc=spec.run_id, disable=not progress,
                   mininterval=0.5 if tty else 30.0, dynamic_ncols=True, file=sys.stderr)
        clock = time.perf_counter()

        def tick() -> None:  # add wall time since the last tick to elapsed_s
            nonlocal clock
            now = time.perf_counter()
            st.elapsed_s += now - clock
            clock = now

        def run_eval() -> None:
            check_finite()
            loss = evaluate(fwd, model, val_data, val_starts, mp.context, autocast)
            if not math.isfinite(loss):
                raise Diverged(st.step, f"validation loss is {loss}")
            tick()
            st.last_val = {"loss": loss, "bpc": loss / LN2}
            write_metrics({"step": st.step, "split": "val", "loss": loss, "bpc": loss / LN2,
                           "lr": lr_at(max(st.step - 1, 0), tp), "tokens": st.step * tokens_per_step,
                           "elapsed_s": st.elapsed_s,
                           "tokens_per_s": st.step * tokens_per_step / st.train_s if st.train_s > 0 else 0.0})
            tracker.flush()
            bar.write(f"{spec.run_id} step {st.step}: val loss {loss:.4f} ({loss / LN2:.4f} bpc)")

        if st.step == 0 and st.metrics_lines == 0:
            run_eval()
        with _Stop() as stop:
            interval_t, interval_tokens = 0.0, 0
            while st.step < tp.max_steps:
                if stop_after is not None and st.step >= stop_after or stop.requested:
                    break
                t0 = time.perf_counter()
                lr = lr_at(st.step, tp)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                starts = torch.randint(0, n_train_starts, (tp.batch_size,), generator=batch_gen)
                x, y = windows(train_data, starts, mp.context)
                with autocast():
                    logits = fwd(x)
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if tp.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), tp.grad_clip)
                optimizer.step()
                st.step += 1
                newly_bad = (bad_step < 0) & ~torch.isfinite(loss.detach())
                bad_step = torch.where(newly_bad, st.step, bad_step)
                bad_value = torch.where(newly_bad, loss.detach().float(), bad_value)
                st.acc += loss.detach()
                st.acc_n += 1
                interval_tokens += tokens_per_step
                if st.step % log_every == 0 or st.step == tp.max_steps:
                    mean = float(st.acc.item()) / st.acc_n  # syncs CUDA: the interval time is real
                    check_finite()
                    dt = time.perf_counter() - t0
                    interval_t += dt
                    st.train_s += dt
                    tick()
                    rate = interval_tokens / interval_t if interval_t > 0 else 0.0
                    st.last_train = mean
                    write_metrics({"step": st.step, "split": "train", "loss": mean, "bpc": mean / LN2,
                                   "lr": lr, "tokens": st.step * tokens_per_step, "elapsed_s": st.elapsed_s,
                                   "tokens_per_s": rate})
                    st.acc.zero_()
                    st.acc_n = 0
                    interval_t, interval_tokens = 0.0, 0
                    bar.set_postfix(loss=f"{mean:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
                else:
                    dt = time.perf_counter() - t0
                    interval_t += dt
                    st.train_s += dt
                bar.update(1)
                if st.step % tp.eval_every == 0 or st.step == tp.max_steps:
                    run_eval()  # counted in elapsed_s, not in train_s
                if st.step % tp.checkpoint_every == 0 or st.step == tp.max_steps:
                    tick()
                    save_checkpoint()
                if hold_at is not None and st.step == hold_at:
                    print(f"kernattn train: {spec.run_id}: holding after step {st.step} ({HOLD_ENV})",
                          file=sys.stderr, flush=True)
                    while not stop.requested:
                        time.sleep(0.02)
            tick()
            if st.step < tp.max_steps:  # --stop-after or SIGTERM
                save_checkpoint()
                status = "KILLED"
                why = "SIGTERM" if stop.requested else f"--stop-after {stop_after}"
                bar.write(f"kernattn train: {spec.run_id}: stopped at step {st.step} ({why}); "
                          f"checkpoint {ckpt_path}; rerun the command to resume")
                return 143 if stop.requested else 0

        # ---- finished: artifacts, final.json last
        final = {
            "run_id": spec.run_id, "row": spec.row, "seed": spec.seed, "variant": spec.variant,
            "options": spec.options, "label": spec.label, "source": spec.source,
            "val_loss": st.last_val["loss"], "val_bpc": st.last_val["bpc"], "train_loss": st.last_train,
            "n_params": config["n_params"], "extra_params": config["extra_params"],
            "tokens_seen": st.step * tokens_per_step, "steps": st.step, "wall_s": st.elapsed_s,
            "tokens_per_s": st.step * tokens_per_step / st.train_s if st.train_s > 0 else 0.0,
            "device": device.type, "mlflow_run_id": st.mlflow_run_id,
            "tracking_uri": params.tracking.uri if st.mlflow_run_id else None,
            "git_commit": commit, "params_digest": config["params_digest"], "scale": params.scale,
            "n_params_non_embedding": config["n_params_non_embedding"], "train_s": st.train_s,
            "fingerprint": fingerprint,
        }
        metrics_fh.close()
        tracker.set_tags({"val_loss": f"{final['val_loss']:.6f}"})
        tracker.log_artifacts([run_dir / CONFIG, metrics_path])
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / FINAL
            staged.write_text(json.dumps(final, indent=2) + "\n")
            tracker.log_artifact(staged)
        status = "FINISHED"
        tracker.end(status)
        atomic_write_json(final_path, final, sort_keys=False)
        bar.write(f"kernattn train: {spec.run_id}: done, val loss {final['val_loss']:.4f} "
                  f"({final['val_bpc']:.4f} bpc) after {st.step} steps, {st.elapsed_s:.1f} s")
        return 0
    except Diverged as exc:
        kept = (f"the last good checkpoint (step {st.ckpt_step}) is kept at {ckpt_path}" if st.ckpt_step is not None
                else "no checkpoint had been written")
        message = (f"{spec.run_id}: {exc}; training stopped, {kept}; lower train.lr (now {tp.lr:g}) or "
                   f"set train.grad_clip, then rerun with --fresh")
        if not metrics_fh.closed:  # the record says how the run ended (cut again by a resume)
            metrics_fh.write(json.dumps({"step": exc.step, "status": "FAILED", "error": str(exc),
                                         "checkpoint_step": st.ckpt_step}))
        tracker.set_tags({"failure": message[:500]})
        if bar is not None:
            bar.close()
        print(f"kernattn train: error: {message}", file=sys.stderr, flush=True)
        return EXIT_DIVERGED
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        if not metrics_fh.closed:
            metrics_fh.close()
        if bar is not None:
            bar.close()
        if status != "FINISHED":
            tracker.end(status)


def main(argv: list[str] | None = None) -> int:
    """`python -m kernattn.train ...`: this stage alone (same options as `kernattn train`)."""
    from .cli import _Parser

    parser = _Parser(prog="kernattn train", description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"kernattn train: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
