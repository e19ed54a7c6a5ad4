"""Train one vision run: a DeiT-style ViT with one attention variant, the DeiT recipe.

    kernattn train-vision [--params P] [--scale S] --run gka-s0 [--fresh] [--stale archive]

<run> is '<variant>-s<seed>' with variant in vision.variants (deit, gka, vlt). Writes
vision.out_dir/<run>/: config.json, metrics.jsonl (train lines: loss, lr, img/s; val lines:
top-1 and loss of the raw weights and of the EMA weights), ckpt.pt (every checkpoint_every
steps, at the end and on SIGTERM), final.json last (top1, top1_ema, learned sigma per layer
and head for GKA).

Recipe (seed 003 section 4.1; timm's parts): AdamW (timm.optim.create_optimizer_v2, which
puts every 1-D parameter - biases, norms, GKA's log-sigma - and the model's no_weight_decay
set - position embedding, class token - in a group without weight decay), lr = lr x
batch_size / lr_batch, linear warmup over warmup_epochs then cosine to min_lr per step
(timm.scheduler.CosineLRScheduler), Mixup/CutMix with label smoothing
(timm.data.Mixup + SoftTargetCrossEntropy; LabelSmoothingCrossEntropy when both are off),
RandAugment, random erasing, repeated augmentation (each image `repeated_aug` times per epoch
at the same epoch length), drop path, gradient clipping, EMA (timm.utils.ModelEmaV3).

Data order: epoch e visits a permutation drawn from a generator seeded by (seed, e), so a
resumed run picks up the same order; the checkpoint holds every RNG state, so on CPU with
workers 0 a resumed run matches an uninterrupted one. A non-finite loss stops the run with a
message naming the step (exit 1, no checkpoint of the broken state). SIGTERM: checkpoint,
exit 143.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import platform
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ..errors import UsageError
from ..io import atomic_write_json, atomic_write_text
from ..train import (_atomic_torch_save, _derive_seed, _digest, _Stop, git_info, open_run_dir, resolve_device,
                     rng_state, seed_everything, set_rng_state)
from . import data as vdata
from .models import attention_modules, build_vit, spec_from_params
from .params import LABELS, VARIANTS, add_params_arguments, stage_params

HELP = "train one DeiT-style ViT run (deit / gka / vlt x seed) with the DeiT recipe"
CKPT_FORMAT = 1
CONFIG, METRICS, CKPT, FINAL = "config.json", "metrics.jsonl", "ckpt.pt", "final.json"
# What a resume reads from a checkpoint (train.open_run_dir refuses one without them).
CKPT_KEYS = ("fingerprint", "fingerprint_config", "step", "metrics_lines", "model", "ema", "optimizer", "rng",
             "elapsed_s", "train_s", "acc", "acc_n", "last_val")
# vision.* fields that change neither the weights nor the metrics.
NOT_FINGERPRINTED = ("out_dir", "checkpoint_every", "threads", "compile", "device", "workers", "viz_image",
                     "viz_seed", "viz_max_tokens", "analysis_dir", "counts_dir", "data_dir", "data_root",
                     "download", "variants", "seeds")


def run_ids(vp) -> list[str]:
    return [f"{v}-s{s}" for v in vp.variants for s in vp.seeds]


def parse_run(vp, run_id: str) -> tuple[str, int]:
    if run_id not in run_ids(vp):
        raise UsageError(f"no vision run {run_id!r}; runs: {', '.join(run_ids(vp))}")
    variant, seed = run_id.rsplit("-s", 1)
    return variant, int(seed)


def effective_lr(vp) -> float:
    return vp.lr * vp.batch_size / vp.lr_batch


def epoch_order(n: int, seed: int, epoch: int, repeats: int) -> torch.Tensor:
    """Indices of epoch `epoch`: a seeded permutation, each image `repeats` times in a row, cut
    to n (repeated augmentation keeps the epoch length)."""
    gen = torch.Generator().manual_seed(_derive_seed(seed, f"epoch{epoch}"))
    perm = torch.randperm(n, generator=gen)
    return perm.repeat_interleave(repeats)[:n] if repeats > 1 else perm


def make_optimizer(model, vp):
    from timm.optim import create_optimizer_v2

    return create_optimizer_v2(model, "adamw", lr=effective_lr(vp), weight_decay=vp.weight_decay,
                               betas=(vp.beta1, vp.beta2))


def make_scheduler(optimizer, vp, steps_per_epoch: int):
    from timm.scheduler import CosineLRScheduler

    total = vp.epochs * steps_per_epoch
    warmup = int(round(vp.warmup_epochs * steps_per_epoch))
    return CosineLRScheduler(optimizer, t_initial=total, lr_min=vp.min_lr, warmup_t=warmup,
                             warmup_lr_init=vp.warmup_lr, warmup_prefix=True, t_in_epochs=False)


def make_loss(vp, num_classes: int):
    """(mixup_fn or None, training criterion)."""
    from timm.data import Mixup
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

    if vp.mixup > 0 or vp.cutmix > 0:
        mix = Mixup(mixup_alpha=vp.mixup, cutmix_alpha=vp.cutmix, label_smoothing=vp.label_smoothing,
                    num_classes=num_classes)
        return mix, SoftTargetCrossEntropy()
    if vp.label_smoothing > 0:
        return None, LabelSmoothingCrossEntropy(vp.label_smoothing)
    return None, torch.nn.CrossEntropyLoss()


@torch.no_grad()
def evaluate(model, loader, device, autocast) -> tuple[float, float]:
    """(top-1 in %, mean cross-entropy) on `loader`."""
    was = model.training
    model.eval()
    correct, total, loss = 0, 0, 0.0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast():
            logits = model(x).float()
        loss += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(-1) == y).sum())
        total += len(y)
    model.train(was)
    return 100.0 * correct / total, loss / total


def sigma_table(model) -> list[list[float]] | None:
    """Learned bandwidths [layer][head] of a GKA model (None for the others)."""
    mods = attention_modules(model)
    if not hasattr(mods[0].inner, "log_sigma"):
        return None
    return [m.inner.log_sigma.detach().exp().float().cpu().tolist() for m in mods]


def fingerprint_config(vp, variant: str, seed: int, meta: dict) -> dict:
    return {"format": CKPT_FORMAT, "variant": variant, "seed": seed,
            "vision": {k: v for k, v in dataclasses.asdict(vp).items() if k not in NOT_FINGERPRINTED},
            "data": {"dataset": meta["dataset"], "digest": meta["digest"]}}


def train(params, run_id: str, *, fresh: bool = False, stop_after: int | None = None,
          stale: str = "error", progress: bool = True) -> int:
    from timm.utils import ModelEmaV3

    from ..tracking import Tracker, flatten

    vp = params.vision
    variant, seed = parse_run(vp, run_id)
    run_dir = Path(vp.out_dir) / run_id
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    meta = vdata.read_meta(vp)
    fp_config = fingerprint_config(vp, variant, seed, meta)
    fingerprint = _digest(fp_config)
    ckpt_path, final_path, metrics_path = run_dir / CKPT, run_dir / FINAL, run_dir / METRICS
    done, ckpt = open_run_dir(run_dir, fingerprint, fp_config, stale=stale, command="train-vision",
                              run_id=run_id, variant=variant, keys=CKPT_KEYS)
    if done:
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)

    # ---- device, data, model, recipe
    device = resolve_device(vp.device)
    cuda = device.type == "cuda"
    if vp.threads is not None:
        torch.set_num_threads(vp.threads)
    seed_everything(seed)
    train_set, val_set = vdata.datasets_for(vp)
    steps_per_epoch = len(train_set) // vp.batch_size
    if steps_per_epoch < 1:
        raise UsageError(f"vision.batch_size={vp.batch_size} exceeds the {len(train_set)} training images")
    total_steps = vp.epochs * steps_per_epoch
    spec = spec_from_params(vp, variant, meta["in_chans"], meta["num_classes"])
    model = build_vit(spec).to(device)
    ema = ModelEmaV3(model, decay=vp.ema_decay)
    optimizer = make_optimizer(model, vp)
    scheduler = make_scheduler(optimizer, vp, steps_per_epoch)
    mixup, criterion = make_loss(vp, meta["num_classes"])
    fwd = torch.compile(model) if (cuda and vp.compile) else model
    use_bf16 = cuda and vp.dtype == "bfloat16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    loader_kw = {"batch_size": vp.batch_size, "num_workers": vp.workers, "pin_memory": cuda,
                 "persistent_workers": False}
    val_loader = torch.utils.data.DataLoader(val_set, shuffle=False, generator=torch.Generator(), **loader_kw)
    unused_gen = torch.Generator()  # train.rng_state wants one; our data order is per-epoch seeded

    st = SimpleNamespace(step=0, metrics_lines=0, elapsed_s=0.0, train_s=0.0, last_val=None,
                         mlflow_run_id=None, acc=0.0, acc_n=0)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        ema.module.load_state_dict(ckpt["ema"])
        optimizer.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"], unused_gen)
        st.step, st.metrics_lines = int(ckpt["step"]), int(ckpt["metrics_lines"])
        st.elapsed_s, st.train_s = float(ckpt["elapsed_s"]), float(ckpt["train_s"])
        st.acc, st.acc_n = float(ckpt["acc"]), int(ckpt["acc_n"])
        st.last_val, st.mlflow_run_id = ckpt["last_val"], ckpt.get("mlflow_run_id")
    kept = metrics_path.read_text().splitlines()[: st.metrics_lines] if ckpt is not None and metrics_path.is_file() else []
    atomic_write_text(metrics_path, "".join(line + "\n" for line in kept))
    st.metrics_lines = len(kept)

    n_params = sum(p.numel() for p in model.parameters())
    commit, dirty = git_info()
    config: dict[str, Any] = {
        "scale": params.scale, "run_id": run_id, "variant": variant, "attention": VARIANTS[variant][0],
        "label": LABELS[variant], "seed": seed, "params_digest": params.digest(), "fingerprint": fingerprint,
        "vision": dataclasses.asdict(vp), "data": meta | {"classes": len(meta["classes"])},
        "n_params": n_params, "effective_lr": effective_lr(vp), "steps_per_epoch": steps_per_epoch,
        "total_steps": total_steps, "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.machine(),
        "effective": {"dtype": "bfloat16" if use_bf16 else "float32", "compile": fwd is not model,
                      "threads": torch.get_num_threads()},
        "torch_version": torch.__version__, "git_commit": commit, "git_dirty": dirty,
        "resumed_from_step": st.step if ckpt is not None else None,
    }
    tracking = dataclasses.replace(params.tracking, experiment=f"kernattn-vision-{params.scale}")
    tracker = Tracker(tracking)
    tags = {"run_id": run_id, "variant": variant, "seed": seed, "git_commit": commit, "scale": params.scale,
            "fingerprint": fingerprint, "device": device.type}
    mlflow_params = flatten({k: config[k] for k in ("scale", "variant", "seed", "vision", "n_params",
                                                   "effective_lr", "fingerprint")})
    rid = tracker.start(name=f"vision-{run_id}", tags=tags, params=mlflow_params, resume_run_id=st.mlflow_run_id)
    if rid is not None:
        st.mlflow_run_id = rid
    config["tracking"] = {"uri": tracking.uri, "experiment": tracking.experiment, "mlflow_run_id": st.mlflow_run_id}
    atomic_write_json(run_dir / CONFIG, config, sort_keys=False)
    print(f"kernattn train-vision: {run_id}: {n_params:,} params, {steps_per_epoch} steps/epoch x {vp.epochs}, "
          f"lr {effective_lr(vp):.2e}, device {device.type}, "
          f"{'resuming at step ' + str(st.step) if ckpt is not None else 'from scratch'}", flush=True)

    metrics_fh = open(metrics_path, "a")

    def write_metrics(rec: dict) -> None:
        metrics_fh.write(json.dumps(rec) + "\n")
        metrics_fh.flush()
        st.metrics_lines += 1
        tracker.log_metrics({f"{rec['split']}_{k}": v for k, v in rec.items()
                             if k not in ("step", "split", "epoch") and isinstance(v, (int, float))}, rec["step"])

    def save_checkpoint() -> None:
        _atomic_torch_save(ckpt_path, {
            "format": CKPT_FORMAT, "fingerprint": fingerprint, "fingerprint_config": fp_config,
            "step": st.step, "metrics_lines": st.metrics_lines, "model": model.state_dict(),
            "ema": ema.module.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state(unused_gen),
            "elapsed_s": st.elapsed_s, "train_s": st.train_s, "acc": st.acc, "acc_n": st.acc_n,
            "last_val": st.last_val, "mlflow_run_id": st.mlflow_run_id,
        })
        tracker.flush()

    def run_eval(epoch: int) -> None:
        top1, loss = evaluate(model, val_loader, device, autocast)
        top1_ema, loss_ema = evaluate(ema.module, val_loader, device, autocast)
        st.last_val = {"top1": top1, "loss": loss, "top1_ema": top1_ema, "loss_ema": loss_ema}
        write_metrics({"step": st.step, "epoch": epoch, "split": "val", **st.last_val, "elapsed_s": st.elapsed_s})
        tracker.flush()
        print(f"{run_id} step {st.step} (epoch {epoch}): top-1 {top1:.2f}% (EMA {top1_ema:.2f}%)", flush=True)

    status = "FAILED"
    log_every = max(1, steps_per_epoch // 4)
    try:
        clock = time.perf_counter()
        if st.step == 0 and st.metrics_lines == 0:
            run_eval(0)
        with _Stop() as stop:
            model.train()
            while st.step < total_steps:
                epoch, offset = divmod(st.step, steps_per_epoch)
                order = epoch_order(len(train_set), seed, epoch, vp.repeated_aug)
                order = order[offset * vp.batch_size: steps_per_epoch * vp.batch_size]
                # its own generator: creating a loader iterator draws a base seed, which must not
                # come from the global RNG that the augmentations use (a resume creates one more)
                loader = torch.utils.data.DataLoader(
                    torch.utils.data.Subset(train_set, order.tolist()), shuffle=False, drop_last=True,
                    generator=torch.Generator().manual_seed(_derive_seed(seed, f"loader{epoch}")), **loader_kw)
                t0 = time.perf_counter()
                stopping = lambda: stop_after is not None and st.step >= stop_after or stop.requested  # noqa: E731
                if stopping():
                    break
                for x, y in loader:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    if mixup is not None:
                        x, y = mixup(x, y)
                    with autocast():
                        loss = criterion(fwd(x).float(), y)
                    if not torch.isfinite(loss):
                        print(f"kernattn train-vision: {run_id}: loss is {float(loss.detach())} at step {st.step + 1} "
                              f"(epoch {epoch}); stopping without a checkpoint of this state; lower vision.lr "
                              f"or use float32", file=sys.stderr)
                        return 1
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if vp.grad_clip > 0:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), vp.grad_clip)
                    optimizer.step()
                    st.step += 1
                    scheduler.step_update(num_updates=st.step)
                    ema.update(model, step=st.step)
                    st.acc += float(loss.detach())
                    st.acc_n += 1
                    if st.step % log_every == 0 or st.step % steps_per_epoch == 0:
                        dt = time.perf_counter() - t0
                        st.train_s += dt
                        write_metrics({"step": st.step, "epoch": epoch, "split": "train", "loss": st.acc / st.acc_n,
                                       "lr": optimizer.param_groups[0]["lr"],
                                       "img_per_s": st.acc_n * vp.batch_size / dt if dt > 0 else 0.0})
                        st.acc, st.acc_n = 0.0, 0
                        t0 = time.perf_counter()
                    if st.step % vp.checkpoint_every == 0 and st.step < total_steps:
                        save_checkpoint()
                    if st.step < total_steps and stopping():  # after the step: the next batch is not drawn yet
                        break
                else:
                    st.train_s += time.perf_counter() - t0
                    done_epoch = st.step // steps_per_epoch
                    if done_epoch % vp.eval_every == 0 or st.step == total_steps:
                        now = time.perf_counter()
                        st.elapsed_s += now - clock
                        clock = now
                        run_eval(done_epoch)
                    continue
                break  # --stop-after or SIGTERM
            st.elapsed_s += time.perf_counter() - clock
            clock = time.perf_counter()
            if st.step < total_steps:
                save_checkpoint()
                status = "KILLED"
                why = "SIGTERM" if stop.requested else f"--stop-after {stop_after}"
                print(f"kernattn train-vision: {run_id}: stopped at step {st.step} ({why}); checkpoint {ckpt_path}")
                return 143 if stop.requested else 0
        save_checkpoint()
        final = {
            "run_id": run_id, "variant": variant, "attention": VARIANTS[variant][0], "label": LABELS[variant],
            "seed": seed, "top1": st.last_val["top1"], "top1_ema": st.last_val["top1_ema"],
            "val_loss": st.last_val["loss"], "val_loss_ema": st.last_val["loss_ema"], "n_params": n_params,
            "sigma": sigma_table(model), "steps": st.step, "epochs": vp.epochs, "wall_s": st.elapsed_s,
            "train_s": st.train_s, "dataset": meta["dataset"], "n_train": meta["n_train"], "n_val": meta["n_val"],
            "device": device.type, "scale": params.scale, "git_commit": commit, "fingerprint": fingerprint,
            "mlflow_run_id": st.mlflow_run_id,
        }
        metrics_fh.close()
        tracker.set_tags({"top1": f"{final['top1']:.2f}", "top1_ema": f"{final['top1_ema']:.2f}"})
        tracker.log_artifacts([run_dir / CONFIG, metrics_path])
        status = "FINISHED"
        tracker.end(status)
        atomic_write_json(final_path, final, sort_keys=False)
        print(f"kernattn train-vision: {run_id}: done, top-1 {final['top1']:.2f}% (EMA {final['top1_ema']:.2f}%) "
              f"after {st.step} steps, {st.elapsed_s:.1f} s")
        return 0
    finally:
        if not metrics_fh.closed:
            metrics_fh.close()
        if status != "FINISHED":
            tracker.end(status)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_arguments(parser)
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="'<variant>-s<seed>', e.g. gka-s0")
    parser.add_argument("--fresh", action="store_true", help="delete the run folder first")
    parser.add_argument("--stale", choices=("error", "archive"), default="error",
                        help="a run folder from other params: stop (error) or move it to .stale/ (archive)")
    parser.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    return train(stage_params(args), args.run, fresh=args.fresh, stop_after=args.stop_after, stale=args.stale)
