"""The `vision:` section of params.yaml (gka-paper, section 4.1 at the paper scale).

Flat fields, the runtime ones (device, dtype, ...) inherited from common.RunSettings (the
loader builds one dataclass per section and runs `check` on load). The paper scale is DeiT-Ti on
ImageNet-1k at 224 px with the DeiT recipe; `tiny` trains a small ViT on a Fashion-MNIST
subset on CPU; `micro` a few steps for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ParamsError
from .common import RunSettings, run_default
from .rows import Row, check_rows
from .schema import NOFP, fraction, nonneg, positive

DATASETS = ("fashion_mnist", "cifar10", "cifar100", "imagenet")
# The three models of Table 5, usable as a row's variant: name -> (registry variant, options).
# DeiT and VLT keep the biases of DeiT's qkv projection; GKA has no input projection at all.
VARIANTS = {
    "deit": ("softmax", {"position": "none", "bias": True}),
    "vlt": ("valueless", {"position": "none", "bias": True}),
    "gka": ("gka", {}),
}
# For the options a row leaves out (only those its variant has): no 1-D position scheme (the
# ViT's positions are its learned 2-D embedding), DeiT's qkv biases.
VISION_DEFAULTS = {"position": "none", "bias": True}
# Section 7's figures (analyze-vision) are drawn for the rows of these attentions: DeiT's
# softmax and GKA, the two the paper shows side by side.
VIZ_ATTENTIONS = ("softmax", "gka")


def check_position_free(label: str, name: str, options: dict, module) -> None:
    """One line naming the option when a ViT's attention (a module, or its options: both say
    `position_scheme()`) applies a 1-D position scheme: on a
    patch grid i - j is a raster offset (a patch and the one below it a grid width apart, the
    class token at lag 0 to the first patch), not a spatial lag."""
    from ..attention import AttentionConfigError

    scheme = module.position_scheme()
    if scheme is not None:
        hint = ("set option position: none" if "position" in options
                else "set option rope: false" if options.get("rope") else "use a variant without a lag bias")
        what = repr(label) if label == name else f"{label!r} ({name})"
        raise AttentionConfigError(
            f"vision attention {what} applies {scheme} along the token order, which on a patch grid "
            f"is a 1-D raster offset, not a spatial lag; the ViT's positions are its learned 2-D embedding: {hint}")


@dataclass(frozen=True)
class VisionParams(RunSettings):
    """The ViT track; the runtime fields (device, dtype, grad_clip, ...) are RunSettings'."""

    # ---- data

    # The image data set: ImageNet-1k at the paper scale; the small ones train on a CPU (tiny
    # and micro: Fashion-MNIST).
    dataset: str = field(default="imagenet", metadata={"choices": DATASETS})
    # imagenet: a folder with train/ and val/ in ImageFolder layout; cifar: torchvision's root;
    # fashion_mnist: your folder of the four idx .gz files (None: the catalogue's fashion-mnist).
    data_root: str | None = field(default=None, metadata=NOFP)
    download: bool = field(default=False, metadata=NOFP)  # CIFAR: allow torchvision to download (Fashion-MNIST: the catalogue)
    train_subset: int | None = field(default=None, metadata=positive("first N training images (None: all)"))
    val_subset: int | None = field(default=None, metadata=positive("first N validation images (None: all)"))
    # Folder of the prepared data (meta.json; train.pt and val.pt of the in-memory data sets,
    # ImageNet is read from data_root); {scale} filled in.
    data_dir: str = field(default="results/{scale}/vision/data", metadata=NOFP)
    # ---- model (DeiT-Ti)

    # Side of the square images the ViT takes, in pixels (DeiT: 224); a multiple of patch_size.
    img_size: int = field(default=224, metadata=positive())
    # Side of a patch in pixels: (img_size / patch_size)^2 patch tokens and the class token (DeiT: 16).
    patch_size: int = field(default=16, metadata=positive())
    # Token width (DeiT-Ti 192, S 384, B 768); a multiple of n_head.
    embed_dim: int = field(default=192, metadata=positive())
    # Transformer blocks (DeiT-Ti: 12).
    depth: int = field(default=12, metadata=positive())
    # Attention heads per block (DeiT-Ti: 3).
    n_head: int = field(default=3, metadata=positive())
    # The MLP's hidden width as a multiple of embed_dim.
    mlp_ratio: float = field(default=4.0, metadata=positive())
    # Stochastic depth: timm's drop_path_rate, the last block's rate, rising linearly from 0 over
    # the blocks (DeiT-Ti: 0.1).
    drop_path: float = field(default=0.1, metadata=nonneg())
    # the runs: rows (config.rows; a variant is a registry name or deit / vlt / gka) x seeds;
    # a run's fingerprint holds its own row, not the list
    rows: tuple[Row, ...] = field(default=(), metadata=NOFP)
    # The seeds every row trains unless it names its own.
    seeds: tuple[int, ...] = field(default=(0,), metadata=NOFP)
    # ---- optimisation (DeiT recipe, gka-paper section 4.1)

    # Training epochs (DeiT: 300); an epoch is training images // batch_size steps.
    epochs: int = field(default=300, metadata=positive())
    # Images per optimizer step over all ranks and micro-batches (the lr scales with it).
    batch_size: int = field(default=256, metadata=positive())
    lr: float = field(default=1e-3, metadata=positive("base lr at lr_batch images per step"))
    lr_batch: int = field(default=1024, metadata=positive("lr = lr x batch_size / lr_batch"))
    # The lr the per-step cosine decays to (not scaled by the batch).
    min_lr: float = field(default=1e-6, metadata=nonneg())
    # Epochs of linear warm-up from warmup_lr to the scaled lr (fractions of an epoch allowed).
    warmup_epochs: float = field(default=5.0, metadata=nonneg())
    # The lr the warm-up starts from (not scaled by the batch).
    warmup_lr: float = field(default=1e-6, metadata=nonneg())
    # AdamW's weight decay (timm's groups: none on 1-D parameters, the position embedding and the
    # class token).
    weight_decay: float = field(default=0.05, metadata=nonneg())
    # AdamW's beta1 (first-moment decay).
    beta1: float = field(default=0.9, metadata=fraction())
    # AdamW's beta2 (second-moment decay).
    beta2: float = field(default=0.999, metadata=fraction())
    # ---- augmentation and regularisation
    rand_augment_n: int = field(default=2, metadata=nonneg("RandAugment ops per image (0: off)"))
    rand_augment_m: int = field(default=9, metadata=nonneg("RandAugment magnitude"))
    # Probability of random erasing per training image (0: off; DeiT: 0.25).
    random_erasing: float = field(default=0.25, metadata=nonneg())
    # Mixup's alpha: the mixing weight is drawn from Beta(alpha, alpha) (0: off; DeiT: 0.8).
    mixup: float = field(default=0.8, metadata=nonneg())
    # CutMix's alpha (0: off; DeiT: 1.0); with mixup on too, timm's Mixup picks one per batch.
    cutmix: float = field(default=1.0, metadata=nonneg())
    # Label smoothing of the training targets (0: none; DeiT: 0.1).
    label_smoothing: float = field(default=0.1, metadata=nonneg())
    repeated_aug: int = field(default=3, metadata=positive("repeats per image (1: off)"))
    # random resized crop scale range [crop_scale_min, 1] (1: no crop, the image as is)
    crop_scale_min: float = field(default=0.08, metadata={"check": lambda v: None if 0 < v <= 1 else "must be in (0, 1]"})
    # Random horizontal flips of the training images (probability 0.5).
    hflip: bool = True
    # Decay per step of the weights' exponential moving average, evaluated beside the raw weights
    # (top1_ema; DeiT: 0.99996).
    ema_decay: float = field(default=0.99996, metadata=fraction())
    # ---- running
    eval_every: int = field(default=1, metadata=positive("epochs between validations"))
    # DataLoader worker processes per rank (0: load in the training process).
    workers: int = field(default=8, metadata=nonneg(**NOFP))
    out_dir: str = run_default("out_dir", "results/{scale}/vision/runs")
    # ---- section 7 figures
    viz_image: int = field(default=0, metadata=nonneg("index of the validation image", **NOFP))
    # The seed whose run of each softmax or GKA row section 7's figures are drawn for (the row's first
    # seed when it does not train this one).
    viz_seed: int = field(default=0, metadata=NOFP)
    viz_max_tokens: int = field(default=50, metadata=positive("diagonal-masked matrices are subsampled to this", **NOFP))
    # Folder of the section 7 figures, one folder per run (kernattn analyze-vision).
    analysis_dir: str = field(default="results/{scale}/vision/analysis", metadata=NOFP)
    # Folder of counts.json: parameters, sigma scalars, FLOPs and checkpoint size of gka-paper's
    # Tables 2, 3 and 5 (kernattn count-vision).
    counts_dir: str = field(default="results/{scale}/vision/counts", metadata=NOFP)

    def check(self, where: str) -> None:
        """The cross-key checks; `where` names the file and scale."""
        if self.img_size % self.patch_size:
            raise ParamsError(f"{where}vision.img_size={self.img_size} must be a multiple of "
                              f"vision.patch_size={self.patch_size}")
        if self.embed_dim % self.n_head:
            raise ParamsError(f"{where}vision.embed_dim={self.embed_dim} must be a multiple of vision.n_head={self.n_head}")
        if not self.seeds:
            raise ParamsError(f"{where}vision.seeds is empty; give at least one seed")
        check_rows(self.rows, "vision.rows", where, VARIANTS, VISION_DEFAULTS, compute=False,
                   track_check=self._row_check)

    def _row_check(self, name: str, options: dict) -> None:
        """A ViT block's attention of this row takes no 1-D positions (read from its options,
        as the built module states it: no torch at params load)."""
        from ..attention import AttentionConfigError, make_options

        made = make_options(name, options)
        if not made.allows_bidirectional():
            raise AttentionConfigError(f"vision attention {name!r} is causal only (no bidirectional form); "
                                       f"use a variant with one")
        check_position_free(name, name, options, made)
