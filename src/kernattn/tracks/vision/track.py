"""Train one vision run: a DeiT-style ViT with one attention variant, the DeiT recipe.

    kernattn train-vision [--params P] [--scale S] --run gka-s0 [--fresh] [--stale archive]

<run> is '<row>-s<seed>' with the row one of vision.rows (a registry variant or deit / vlt /
gka, with its options; e.g. deit-s0, nwg-s0). Writes
vision.out_dir/<run>/ through the engine (resume, SIGTERM -> 143, divergence -> exit 3 and a
FAILED record, MLflow, final.json last, as every track): config.json, metrics.jsonl (train
lines: epoch, loss, lr, img_per_s; val lines: top-1 and loss of the raw weights and of the
EMA weights, and lr, the last step's), ckpt.pt (model, optimizer, ema, RNG states), final.json (top1, top1_ema, the
learned sigma per layer and head for GKA).

Recipe (gka-paper section 4.1; timm's parts): AdamW (timm.optim.create_optimizer_v2, which
puts every 1-D parameter - biases, norms, GKA's log-sigma - and the model's no_weight_decay
set - position embedding, class token - in a group without weight decay), lr = lr x
batch_size / lr_batch, linear warmup over warmup_epochs then cosine to min_lr per step
(timm.scheduler.CosineLRScheduler), Mixup/CutMix with label smoothing
(timm.data.Mixup + SoftTargetCrossEntropy; LabelSmoothingCrossEntropy when both are off),
RandAugment, random erasing, repeated augmentation (each image `repeated_aug` times per epoch
at the same epoch length), drop path, gradient clipping, EMA (timm.utils.ModelEmaV3).

Data order: epoch e visits a permutation drawn from a generator seeded by (seed, e), so the
data position is the step itself; with the checkpoint's RNG states (augmentations, drop
path, Mixup) a resumed run matches an uninterrupted one on CPU with workers 0.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from ...engine import ONE_PROCESS, Layout, Track, derive_seed
from ...config import RunSpec, fingerprinted
from ...engine.options import add_run_options, run_track
from ...errors import UsageError
from . import data as vdata
from .model import attention_modules, build_vit, spec_from_params
from ...config import params_from_args
from .stages import attention_of, find_vision_run, run_dir



def effective_lr(vp) -> float:
    return vp.lr * vp.batch_size / vp.lr_batch


def epoch_order(n: int, seed: int, epoch: int, repeats: int) -> torch.Tensor:
    """Indices of epoch `epoch`: a seeded permutation, each image `repeats` times in a row, cut
    to n (repeated augmentation keeps the epoch length)."""
    gen = torch.Generator().manual_seed(derive_seed(seed, f"epoch{epoch}"))
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
def evaluate(model, loader, device, autocast) -> torch.Tensor:
    """float64 [correct, summed cross-entropy, images] on `loader`: sums, which ranks scoring
    shares of the validation set add up (engine/dist.py) before top-1 and the mean are taken."""
    was = model.training
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast():
            logits = model(x).float()
        nats = torch.nn.functional.cross_entropy(logits, y, reduction="none").double()
        sums += torch.stack([(logits.argmax(-1) == y).sum().double(), nats.sum(), nats.new_tensor(float(len(y)))])
    model.train(was)
    return sums


def sigma_table(model) -> list[list[float]] | None:
    """Learned bandwidths [layer][head] of a GKA model (None for the others)."""
    mods = attention_modules(model)
    if not hasattr(mods[0].inner, "log_sigma"):
        return None
    return [m.inner.log_sigma.detach().exp().float().cpu().tolist() for m in mods]


def _divisor_at_most(n: int, cap: int) -> int:
    return next(d for d in range(max(1, cap), 0, -1) if n % d == 0)


class VisionTrack(Track):
    command, name, section_name, rate_unit = "train-vision", "vision", "vision", "img"

    def __init__(self, params, run: str | RunSpec):
        """`run`: a run id of vision.rows, or a run spec (a study's variation of a row)."""
        vp = self.section = params.vision
        self.params = params  # no experiment_section: MLflow's experiment is kernattn-vision-<scale>
        self.run = run if isinstance(run, RunSpec) else find_vision_run(params, run)
        self.variant, self.seed = self.run.variant, self.run.seed
        self.run_id = self.run.run_id
        self.run_dir = run_dir(params, self.run_id)
        self.meta = vdata.read_meta(vp)
        self.train_set, self.val_set = vdata.datasets_for(vp)
        self.spe = len(self.train_set) // vp.batch_size  # steps per epoch
        if self.spe < 1:
            raise UsageError(f"vision.batch_size={vp.batch_size} exceeds the {len(self.train_set)} training images")
        self.max_steps, self.items_per_step = vp.epochs * self.spe, vp.batch_size
        self.global_batch = vp.batch_size  # split over ranks and micro-batches by the engine
        self.log_every = _divisor_at_most(self.spe, self.spe // 4)  # four lines an epoch, one at its end
        self.eval_every, self.checkpoint_every = vp.eval_every * self.spe, vp.checkpoint_every
        self._iter, self._next = None, None

    def identity(self) -> dict:
        r = self.run
        return {"run_id": r.run_id, "row": r.row, "seed": r.seed, "variant": r.variant, "options": r.options,
                "attention": attention_of(r), "source": r.source, "label": r.label}

    def fingerprint_config(self) -> dict:
        vp = self.section
        return {"variant": self.variant, "options": self.run.options, "seed": self.seed,
                "vision": fingerprinted(vp),
                "data": {"dataset": self.meta["dataset"], "digest": self.meta["digest"]}}

    def build(self, device: torch.device, layout: Layout = ONE_PROCESS) -> None:
        from timm.utils import ModelEmaV3

        vp, meta = self.section, self.meta
        self.layout = layout
        self.device = device
        self.model = build_vit(spec_from_params(vp, self.variant, meta["in_chans"], meta["num_classes"],
                                                self.run.options)).to(device)
        self.ema = ModelEmaV3(self.model, decay=vp.ema_decay)
        self.optimizer = make_optimizer(self.model, vp)
        # The scheduler holds no state of its own here: set_lr recomputes the lr from the step.
        self.scheduler = make_scheduler(self.optimizer, vp, self.spe)
        self.mixup, self.criterion = make_loss(vp, meta["num_classes"])
        self.loader_kw = {"num_workers": vp.workers, "pin_memory": device.type == "cuda",
                          "persistent_workers": False}
        # each rank scores images rank, rank + world, ...: the whole set once, no padding
        val = torch.utils.data.Subset(self.val_set, self.val_share(range(len(self.val_set))))
        self.val_loader = torch.utils.data.DataLoader(val, shuffle=False, generator=torch.Generator(),
                                                      batch_size=vp.batch_size, **self.loader_kw)

    def parts(self) -> dict:
        return {"model": self.model, "optimizer": self.optimizer, "ema": self.ema.module}

    def set_lr(self, step: int) -> float:
        self.scheduler.step_update(num_updates=step)
        return self.optimizer.param_groups[0]["lr"]

    def _epoch_iter(self, step: int):
        """The rest of step's epoch, from step on. Its own generator: creating a loader iterator
        draws a base seed, which must not come from the global RNG the augmentations use."""
        epoch, offset = divmod(step, self.spe)
        order = epoch_order(len(self.train_set), self.seed, epoch, self.section.repeated_aug)
        steps = order[offset * self.section.batch_size: self.spe * self.section.batch_size]
        # this rank's micro-batches of each step, in order (the shards of engine/dist.py: a repeated
        # image's copies, adjacent in `order`, go to different ranks as with DeiT's RASampler)
        w, accum, micro = self.world, self.grad_accum, self.micro_batch or self.section.batch_size
        mine = steps.reshape(-1, micro, w.size * accum)[:, :, w.rank::w.size]
        rank = f":rank{w.rank}" if w.rank else ""  # each rank its own worker seeds
        gen = torch.Generator().manual_seed(derive_seed(self.seed, f"loader{epoch}{rank}"))
        subset = torch.utils.data.Subset(self.train_set, mine.transpose(1, 2).reshape(-1).tolist())
        return iter(torch.utils.data.DataLoader(subset, shuffle=False, drop_last=True, generator=gen,
                                                batch_size=micro, **self.loader_kw))

    def batch(self, step: int, micro: int):
        if self._iter is None or self._next != (step, micro) or (step % self.spe == 0 and micro == 0):
            self._iter = self._epoch_iter(step)
        self._next = (step, micro + 1) if micro + 1 < self.grad_accum else (step + 1, 0)
        x, y = next(self._iter)
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        return self.mixup(x, y) if self.mixup is not None else (x, y)

    def loss(self, fwd, batch) -> torch.Tensor:
        x, y = batch
        return self.criterion(fwd(x).float(), y)

    def after_step(self, step: int) -> None:
        self.ema.update(self.model, step=step)

    def probe_input(self, rows: int | None = None) -> torch.Tensor:
        return next(iter(self.val_loader))[0][:rows].to(self.device)

    def evaluate(self, fwd, autocast) -> dict:
        raw, ema = (self.reduce_sum(evaluate(m, self.val_loader, self.device, autocast)).tolist()
                    for m in (self.model, self.ema.module))
        return {"top1": 100.0 * raw[0] / raw[2], "loss": raw[1] / raw[2],
                "top1_ema": 100.0 * ema[0] / ema[2], "loss_ema": ema[1] / ema[2]}

    def line_fields(self, split: str, step: int, values: dict) -> dict:
        epoch = (step - 1) // self.spe if split == "train" else step // self.spe
        return {"epoch": epoch, **values}

    def config(self) -> dict:
        vp = self.section
        return {**self.identity(), "vision": dataclasses.asdict(vp),
                "data": self.meta | {"classes": len(self.meta["classes"])},
                "n_params": sum(p.numel() for p in self.model.parameters()), "effective_lr": effective_lr(vp),
                "steps_per_epoch": self.spe, "total_steps": self.max_steps}

    def final(self, st) -> dict:
        v, meta = st.last_val, self.meta
        return {"top1": v["top1"], "top1_ema": v["top1_ema"], "val_loss": v["loss"], "val_loss_ema": v["loss_ema"],
                "n_params": sum(p.numel() for p in self.model.parameters()), "sigma": sigma_table(self.model),
                "epochs": self.section.epochs, "dataset": meta["dataset"], "n_train": meta["n_train"],
                "n_val": meta["n_val"]}

    def final_tags(self, final: dict) -> dict:
        return {"top1": f"{final['top1']:.2f}", "top1_ema": f"{final['top1_ema']:.2f}",
                "val_loss": f"{final['val_loss']:.6f}"}

    def describe_start(self) -> str:
        n = sum(p.numel() for p in self.model.parameters())
        return f"{n:,} params, {self.spe} steps/epoch x {self.section.epochs}, lr {effective_lr(self.section):.2e}"

    def describe_val(self, step: int, values: dict) -> str:
        return (f"{self.run_id} step {step} (epoch {step // self.spe}): top-1 {values['top1']:.2f}% "
                f"(EMA {values['top1_ema']:.2f}%)")

    def describe_final(self, final: dict) -> str:
        return f"top-1 {final['top1']:.2f}% (EMA {final['top1_ema']:.2f}%)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="'<row>-s<seed>', e.g. gka-s0")
    add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    return run_track(VisionTrack(params_from_args(args), args.run), args)


RECIPE = VisionTrack  # what the engine trains for this track (kernattn.tracks.track_recipe: the preflight)
