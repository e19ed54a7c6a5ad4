"""The `vision:` section of params.yaml (seed 003, section 4.1 at the paper scale).

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
    dataset: str = field(default="imagenet", metadata={"choices": DATASETS})
    # imagenet: a folder with train/ and val/ in ImageFolder layout; cifar: torchvision's root;
    # fashion_mnist: your folder of the four idx .gz files (None: the catalogue's fashion-mnist).
    data_root: str | None = field(default=None, metadata=NOFP)
    download: bool = field(default=False, metadata=NOFP)  # CIFAR: allow torchvision to download (Fashion-MNIST: the catalogue)
    train_subset: int | None = field(default=None, metadata=positive("first N training images (None: all)"))
    val_subset: int | None = field(default=None, metadata=positive("first N validation images (None: all)"))
    data_dir: str = field(default="results/{scale}/vision/data", metadata=NOFP)
    # ---- model (DeiT-Ti)
    img_size: int = field(default=224, metadata=positive())
    patch_size: int = field(default=16, metadata=positive())
    embed_dim: int = field(default=192, metadata=positive())
    depth: int = field(default=12, metadata=positive())
    n_head: int = field(default=3, metadata=positive())
    mlp_ratio: float = field(default=4.0, metadata=positive())
    drop_path: float = field(default=0.1, metadata=nonneg())
    # the runs: rows (config.rows; a variant is a registry name or deit / vlt / gka) x seeds;
    # a run's fingerprint holds its own row, not the list
    rows: tuple[Row, ...] = field(default=(), metadata=NOFP)
    seeds: tuple[int, ...] = field(default=(0,), metadata=NOFP)
    # ---- optimisation (DeiT recipe, seed 003 section 4.1)
    epochs: int = field(default=300, metadata=positive())
    batch_size: int = field(default=256, metadata=positive())
    lr: float = field(default=1e-3, metadata=positive("base lr at lr_batch images per step"))
    lr_batch: int = field(default=1024, metadata=positive("lr = lr x batch_size / lr_batch"))
    min_lr: float = field(default=1e-6, metadata=nonneg())
    warmup_epochs: float = field(default=5.0, metadata=nonneg())
    warmup_lr: float = field(default=1e-6, metadata=nonneg())
    weight_decay: float = field(default=0.05, metadata=nonneg())
    beta1: float = field(default=0.9, metadata=fraction())
    beta2: float = field(default=0.999, metadata=fraction())
    # ---- augmentation and regularisation
    rand_augment_n: int = field(default=2, metadata=nonneg("RandAugment ops per image (0: off)"))
    rand_augment_m: int = field(default=9, metadata=nonneg("RandAugment magnitude"))
    random_erasing: float = field(default=0.25, metadata=nonneg())
    mixup: float = field(default=0.8, metadata=nonneg())
    cutmix: float = field(default=1.0, metadata=nonneg())
    label_smoothing: float = field(default=0.1, metadata=nonneg())
    repeated_aug: int = field(default=3, metadata=positive("repeats per image (1: off)"))
    # random resized crop scale range [crop_scale_min, 1] (1: no crop, the image as is)
    crop_scale_min: float = field(default=0.08, metadata={"check": lambda v: None if 0 < v <= 1 else "must be in (0, 1]"})
    hflip: bool = True
    ema_decay: float = field(default=0.99996, metadata=fraction())
    # ---- running
    eval_every: int = field(default=1, metadata=positive("epochs between validations"))
    workers: int = field(default=8, metadata=nonneg(**NOFP))
    out_dir: str = run_default("out_dir", "results/{scale}/vision/runs")
    # ---- section 7 figures
    viz_image: int = field(default=0, metadata=nonneg("index of the validation image", **NOFP))
    viz_seed: int = field(default=0, metadata=NOFP)
    viz_max_tokens: int = field(default=50, metadata=positive("diagonal-masked matrices are subsampled to this", **NOFP))
    analysis_dir: str = field(default="results/{scale}/vision/analysis", metadata=NOFP)
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
        from ..attention import make_options

        check_position_free(name, name, options, make_options(name, options))
