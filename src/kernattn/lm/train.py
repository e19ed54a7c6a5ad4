"""Stage `kernattn train-lm`: train one run of the LM track (resumable).

    kernattn train-lm [--params params.yaml] [--scale S] --run lm-gka-flops-s0 [--fresh]

Reads lm.data_dir (train.npy, val.npy, token_bytes.npy) and writes lm.out_dir/<run_id>/:
config.json (configuration, parameter counts, FLOPs per token, steps and why), metrics.jsonl
(one line per log: step, split train|val, loss in nats/token, lr, tokens, flops, elapsed_s),
ckpt.pt (model, optimizer, step, RNG states; every checkpoint_every steps, atomic), model.pt
(the final weights) and, last, final.json.

Steps: the baseline trains lm.steps (or nanochat's param:data rule, see flops.base_steps);
a GKA run trains the baseline's steps (matched tokens) or as many steps as give the
baseline's total training FLOPs (matched flops). Each step is grad_accum micro-batches of
batch_size random windows of context + 1 tokens (a generator seeded from the run's seed).
Optimiser: AdamW (the nanochat reference uses Muon for the matrices; not reproduced here),
lr constant after a linear warmup (warmup_frac of the steps), then linear warmdown over the
last warmdown_frac to lr x min_lr_ratio.

Resume: rerunning continues from ckpt.pt (loaded with weights_only=True) if its fingerprint
(model, training, run and data) matches; --fresh starts over. SIGTERM finishes the step,
checkpoints and exits 143. A non-finite loss stops the run with an error naming the step
(exit 1, no final.json). MLflow: one run per run folder in experiment lm.experiment.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..io import atomic_write_json, atomic_write_text
from ..train import (_atomic_torch_save, _derive_seed, _Stop, git_info, open_run_dir, resolve_device, rng_state,
                     seed_everything, set_rng_state)
from . import flops as fl
from .model import GPT, GPTConfig, build_model
from .runs import LMRun, add_stage_arguments, load_stage, run_dir

HELP = "LM track: train one run (nanochat GPT, baseline or GKA-LM; resumable)"
CKPT_FORMAT = 1
LN2 = math.log(2.0)
VAL_WINDOWS_SEED = 31337
# lm.* fields that do not change the weights: not in the fingerprint.
NOT_FINGERPRINTED = ("out_dir", "checkpoint_every", "threads", "compile", "device", "eval_dir", "core_items",
                     "core_fewshot", "core_seed", "bpb_tokens", "experiment", "eval_every", "mirror", "shard_url")


class TrainError(RuntimeError):
    """Training cannot go on (e.g. a non-finite loss); one line naming the run and step."""


def load_stream(data_dir: str | Path, split: str, context: int) -> np.ndarray:
    """The split's uint16 token stream, memory-mapped (paper scale: billions of tokens)."""
    from ..errors import UsageError

    path = Path(data_dir) / f"{split}.npy"
    if not path.is_file():
        raise UsageError(f"{path}: no such file; run `kernattn prepare-lm` first")
    arr = np.load(path, mmap_mode="r")
    if arr.dtype != np.uint16 or arr.ndim != 1 or arr.size < context + 2:
        raise UsageError(f"{path}: expected a 1-D uint16 token stream of at least {context + 2} tokens, "
                         f"got {arr.dtype} {arr.shape}; rerun `kernattn prepare-lm`")
    return arr


def data_meta(data_dir: str | Path) -> dict:
    return json.loads((Path(data_dir) / "meta.json").read_text())


def batch(data: np.ndarray, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of context + 1 tokens at `starts` -> (inputs, next-token targets), int64."""
    chunk = torch.from_numpy(data[starts.numpy()[:, None] + np.arange(context + 1)].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


def lr_factor(step: int, total: int, lm) -> float:
    warm = int(lm.warmup_frac * total)
    down = int(lm.warmdown_frac * total)
    if step < warm:
        return (step + 1) / warm
    if down and step >= total - down:
        frac = (total - step) / down
        return lm.min_lr_ratio + (1 - lm.min_lr_ratio) * frac
    return 1.0


def plan(lm, vocab: int, run: LMRun) -> dict[str, Any]:
    """Parameter counts, FLOPs per token and steps of `run` (and of its baseline)."""
    base = build_model(GPTConfig.from_params(lm, vocab, "base"), "meta")
    model = build_model(GPTConfig.from_params(lm, vocab, run.variant), "meta")
    base_fpt, fpt = fl.flops_per_token(base)["total"], fl.flops_per_token(model)
    steps_base = fl.base_steps(lm, base)
    steps = steps_base if run.matched is None else fl.matched_steps(steps_base, base_fpt, fpt["total"], run.matched)
    tps = fl.tokens_per_step(lm)
    return {"params": model.param_counts(), "flops_per_token": fpt, "steps": steps, "base_steps": steps_base,
            "tokens_per_step": tps, "train_tokens": steps * tps, "train_flops": steps * tps * fpt["total"],
            "base_flops_per_token": base_fpt, "matched": run.matched}


# What a resume reads from a checkpoint (train.open_run_dir refuses one without them).
CKPT_KEYS = ("fingerprint", "step", "lines", "elapsed", "model", "optimizer", "rng")


def fingerprint_config(lm, run: LMRun, vocab: int, data_digest: str) -> dict:
    """What makes a run's weights: the lm fields that matter, the run, the vocabulary and data."""
    fields = {k: v for k, v in dataclasses.asdict(lm).items() if k not in NOT_FINGERPRINTED}
    return json.loads(json.dumps({"format": CKPT_FORMAT, "lm": fields, "run": dataclasses.asdict(run),
                                  "vocab": vocab, "data": data_digest}, default=str))


def fingerprint(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


@torch.no_grad()
def mean_loss(model: GPT, data: torch.Tensor, starts: torch.Tensor, context: int, autocast) -> float:
    was = model.training
    model.eval()
    total = 0.0
    for s in starts:
        x, y = batch(data, s, context)
        with autocast():
            total += float(F.cross_entropy(model(x.to(_dev(model))).reshape(-1, model.cfg.vocab_size),
                                           y.to(_dev(model)).reshape(-1)))
    model.train(was)
    return total / len(starts)


def _dev(model) -> torch.device:
    return model.lm_head.weight.device


def train(params, run: LMRun, *, fresh: bool = False, stop_after: int | None = None, stale: str = "error") -> int:
    from ..tracking import Tracker, flatten

    lm = params.lm
    out = run_dir(lm, run.run_id)
    if fresh and out.exists():
        shutil.rmtree(out)
    train_data = load_stream(lm.data_dir, "train", lm.context)
    val_data = load_stream(lm.data_dir, "val", lm.context)
    meta = data_meta(lm.data_dir)
    vocab = int(meta["vocab_size"])
    # the data's identity: meta.json records the sources' sha256s and the token counts
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    fp_config = fingerprint_config(lm, run, vocab, digest)
    fp = fingerprint(fp_config)
    final_path, ckpt_path, metrics_path = out / "final.json", out / "ckpt.pt", out / "metrics.jsonl"
    done, ckpt = open_run_dir(out, fp, fp_config, stale=stale, command="train-lm", run_id=run.run_id,
                              variant=run.variant, keys=CKPT_KEYS)
    if done:
        return 0
    if ckpt is None and out.exists():
        shutil.rmtree(out)  # no checkpoint yet (and no finished run): nothing to keep
    out.mkdir(parents=True, exist_ok=True)

    device = resolve_device(lm.device)
    cuda = device.type == "cuda"
    if lm.threads:
        torch.set_num_threads(lm.threads)
    info = plan(lm, vocab, run)
    seed_everything(run.seed)
    model = GPT(GPTConfig.from_params(lm, vocab, run.variant)).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "value_embeds" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "wte" not in n and "value_embeds" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": lm.weight_decay}, {"params": other, "weight_decay": 0.0}],
                            lr=lm.lr, betas=(0.9, 0.95), **({"fused": True} if cuda else {}))
    fwd = torch.compile(model) if cuda and lm.compile else model
    use_bf16 = cuda and lm.dtype == "bfloat16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    gen = torch.Generator().manual_seed(_derive_seed(run.seed, "lm-batches"))
    val_gen = torch.Generator().manual_seed(VAL_WINDOWS_SEED)
    val_starts = torch.randint(0, val_data.size - lm.context - 1, (4, lm.batch_size), generator=val_gen)
    st = SimpleNamespace(step=0, lines=0, elapsed=0.0, mlflow=None, last_val=None, last_train=None)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"], gen)
        st.step, st.lines, st.elapsed = int(ckpt["step"]), int(ckpt["lines"]), float(ckpt["elapsed"])
        st.mlflow, st.last_val, st.last_train = ckpt.get("mlflow"), ckpt.get("last_val"), ckpt.get("last_train")
    kept = metrics_path.read_text().splitlines()[: st.lines] if (ckpt is not None and metrics_path.is_file()) else []
    atomic_write_text(metrics_path, "".join(line + "\n" for line in kept))
    commit, dirty = git_info()
    config = {"run": dataclasses.asdict(run), "label": run.label, "scale": params.scale, "fingerprint": fp,
              "lm": dataclasses.asdict(lm), "vocab_size": vocab, "windows": model.windows, **info,
              "device": device.type, "torch_version": torch.__version__, "git_commit": commit, "git_dirty": dirty}
    tp = params.tracking
    tracker = Tracker(SimpleNamespace(uri=tp.uri, artifact_root=tp.artifact_root, experiment=lm.experiment,
                                      enabled=tp.enabled))
    st.mlflow = tracker.start(name=run.run_id, tags={"run_id": run.run_id, "variant": run.variant,
                                                     "matched": run.matched or "baseline", "scale": params.scale,
                                                     "git_commit": commit},
                              params=flatten({k: config[k] for k in ("run", "lm", "params", "steps", "matched")}),
                              resume_run_id=st.mlflow)
    config["mlflow_run_id"] = st.mlflow
    atomic_write_json(out / "config.json", config, sort_keys=False)
    total = info["steps"]
    print(f"kernattn train-lm: {run.run_id}: {info['params']['total']:,} params, {total} steps "
          f"({info['train_tokens']:,} tokens, {info['train_flops']:.3e} FLOPs), "
          f"{'resuming at ' + str(st.step) if ckpt else 'from scratch'}", flush=True)
    fh = open(metrics_path, "a")

    def log(rec):
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
        st.lines += 1
        tracker.log_metrics({f"{rec['split']}_loss": rec["loss"]}, rec["step"])

    def save():
        _atomic_torch_save(ckpt_path, {"format": CKPT_FORMAT, "fingerprint": fp, "step": st.step, "lines": st.lines,
                                       "elapsed": st.elapsed, "model": model.state_dict(), "optimizer": opt.state_dict(),
                                       "rng": rng_state(gen), "mlflow": st.mlflow, "last_val": st.last_val,
                                       "last_train": st.last_train, "fingerprint_config": fp_config})
        tracker.flush()

    def val():
        st.last_val = mean_loss(model, val_data, val_starts, lm.context, autocast)
        log({"step": st.step, "split": "val", "loss": st.last_val, "tokens": st.step * info["tokens_per_step"],
             "flops": st.step * info["tokens_per_step"] * info["flops_per_token"]["total"], "elapsed_s": st.elapsed})

    status = "FAILED"
    try:
        t0 = time.perf_counter()
        if st.step == 0 and st.lines == 0:
            val()
        n_starts = train_data.size - lm.context - 1
        with _Stop() as stop:
            while st.step < total:
                if stop.requested or (stop_after is not None and st.step >= stop_after):
                    break
                f = lr_factor(st.step, total, lm)
                for g in opt.param_groups:
                    g["lr"] = lm.lr * f
                opt.zero_grad(set_to_none=True)
                acc = 0.0
                for _ in range(lm.grad_accum):
                    x, y = batch(train_data, torch.randint(0, n_starts, (lm.batch_size,), generator=gen), lm.context)
                    with autocast():
                        loss = F.cross_entropy(fwd(x.to(device)).reshape(-1, vocab), y.to(device).reshape(-1))
                    (loss / lm.grad_accum).backward()
                    acc += float(loss.detach()) / lm.grad_accum
                if not math.isfinite(acc):
                    raise TrainError(f"{run.run_id}: non-finite training loss ({acc}) at step {st.step + 1}; "
                                     f"lower lm.lr or use dtype float32, then rerun with --fresh")
                if lm.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), lm.grad_clip)
                opt.step()
                st.step += 1
                st.last_train = acc
                now = time.perf_counter()
                st.elapsed += now - t0
                t0 = now
                log({"step": st.step, "split": "train", "loss": acc, "lr": lm.lr * f,
                     "tokens": st.step * info["tokens_per_step"],
                     "flops": st.step * info["tokens_per_step"] * info["flops_per_token"]["total"],
                     "elapsed_s": st.elapsed})
                if st.step % lm.eval_every == 0 or st.step == total:
                    val()
                if st.step % lm.checkpoint_every == 0 or st.step == total:
                    save()
            if st.step < total:
                save()
                status = "KILLED"
                print(f"kernattn train-lm: {run.run_id}: stopped at step {st.step}; checkpoint {ckpt_path}")
                return 143 if stop.requested else 0
        fh.close()
        _atomic_torch_save(out / "model.pt", model.state_dict())
        final = {"run_id": run.run_id, "variant": run.variant, "matched": run.matched, "seed": run.seed,
                 "label": run.label, "steps": st.step, "train_tokens": info["train_tokens"],
                 "train_flops": info["train_flops"], "flops_per_token": info["flops_per_token"]["total"],
                 "n_params": info["params"]["total"], "params": info["params"], "val_loss": st.last_val,
                 "train_loss": st.last_train, "wall_s": st.elapsed, "mlflow_run_id": st.mlflow,
                 "fingerprint": fp, "scale": params.scale}
        tracker.log_artifacts([out / "config.json", metrics_path])
        status = "FINISHED"
        tracker.end(status)
        atomic_write_json(final_path, final, sort_keys=False)
        print(f"kernattn train-lm: {run.run_id}: done, val loss {st.last_val:.4f} after {st.step} steps, "
              f"{st.elapsed:.1f} s")
        return 0
    except TrainError as exc:
        print(f"kernattn train-lm: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not fh.closed:
            fh.close()
        if status != "FINISHED":
            tracker.end(status)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser)
    parser.add_argument("--fresh", action="store_true", help="delete the run folder first")
    parser.add_argument("--stale", choices=("error", "archive"), default="error",
                        help="a run folder made under other params: refuse (default) or move it to .stale/")
    parser.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    params, spec = load_stage(args)
    return train(params, spec, fresh=args.fresh, stop_after=args.stop_after, stale=args.stale)
