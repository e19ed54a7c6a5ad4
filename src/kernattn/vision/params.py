"""The `vision:` section of params.yaml (seed 003, section 4.1 at the paper scale).

Flat fields (the loader builds one dataclass per section). The paper scale is DeiT-Ti on
ImageNet-1k at 224 px with the DeiT recipe; `tiny` trains a small ViT on a Fashion-MNIST
subset on CPU; `micro` a few steps for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import _fraction, _nonneg, _pos

DATASETS = ("fashion_mnist", "cifar10", "cifar100", "imagenet")
# The three rows of Table 5: name -> (registry variant, options). DeiT and VLT keep the
# biases of DeiT's qkv projection; GKA has no input projection at all.
VARIANTS = {
    "deit": ("softmax", {"position": "none", "bias": True}),
    "vlt": ("valueless", {"position": "none", "bias": True}),
    "gka": ("gka", {}),
}
LABELS = {"deit": "DeiT (softmax, W_Q W_K W_V W_O)", "vlt": "VLT (no W_V)", "gka": "GKA (W_O only)"}


@dataclass(frozen=True)
class VisionParams:
    # ---- data
    dataset: str = field(default="imagenet", metadata={"choices": DATASETS})
    # imagenet: a folder with train/ and val/ in ImageFolder layout; cifar: torchvision's root;
    # fashion_mnist: a folder holding the four idx .gz files (None: download them).
    data_root: str | None = None
    download: bool = False          # allow torchvision / the Fashion-MNIST URLs to download
    train_subset: int | None = field(default=None, metadata=_pos("first N training images (None: all)"))
    val_subset: int | None = field(default=None, metadata=_pos("first N validation images (None: all)"))
    data_dir: str = "results/{scale}/vision/data"
    # ---- model (DeiT-Ti)
    img_size: int = field(default=224, metadata=_pos())
    patch_size: int = field(default=16, metadata=_pos())
    embed_dim: int = field(default=192, metadata=_pos())
    depth: int = field(default=12, metadata=_pos())
    n_head: int = field(default=3, metadata=_pos())
    mlp_ratio: float = field(default=4.0, metadata=_pos())
    drop_path: float = field(default=0.1, metadata=_nonneg())
    gka_init_sigma: float = field(default=1.0, metadata=_pos())
    variants: tuple[str, ...] = ("deit", "gka", "vlt")
    seeds: tuple[int, ...] = (0,)
    # ---- optimisation (DeiT recipe, seed 003 section 4.1)
    epochs: int = field(default=300, metadata=_pos())
    batch_size: int = field(default=256, metadata=_pos())
    lr: float = field(default=1e-3, metadata=_pos("base lr at lr_batch images per step"))
    lr_batch: int = field(default=1024, metadata=_pos("lr = lr x batch_size / lr_batch"))
    min_lr: float = field(default=1e-6, metadata=_nonneg())
    warmup_epochs: float = field(default=5.0, metadata=_nonneg())
    warmup_lr: float = field(default=1e-6, metadata=_nonneg())
    weight_decay: float = field(default=0.05, metadata=_nonneg())
    beta1: float = field(default=0.9, metadata=_fraction())
    beta2: float = field(default=0.999, metadata=_fraction())
    grad_clip: float = field(default=1.0, metadata=_nonneg())
    # ---- augmentation and regularisation
    rand_augment_n: int = field(default=2, metadata=_nonneg("RandAugment ops per image (0: off)"))
    rand_augment_m: int = field(default=9, metadata=_nonneg("RandAugment magnitude"))
    random_erasing: float = field(default=0.25, metadata=_nonneg())
    mixup: float = field(default=0.8, metadata=_nonneg())
    cutmix: float = field(default=1.0, metadata=_nonneg())
    label_smoothing: float = field(default=0.1, metadata=_nonneg())
    repeated_aug: int = field(default=3, metadata=_pos("repeats per image (1: off)"))
    # random resized crop scale range [crop_scale_min, 1] (1: no crop, the image as is)
    crop_scale_min: float = field(default=0.08, metadata={"check": lambda v: None if 0 < v <= 1 else "must be in (0, 1]"})
    hflip: bool = True
    ema_decay: float = field(default=0.99996, metadata=_fraction())
    # ---- running
    eval_every: int = field(default=1, metadata=_pos("epochs between validations"))
    checkpoint_every: int = field(default=1000, metadata=_pos("steps"))
    workers: int = field(default=8, metadata=_nonneg())
    dtype: str = field(default="bfloat16", metadata={"choices": ("bfloat16", "float32")})
    compile: bool = True
    threads: int | None = field(default=None, metadata=_pos())
    device: str = field(default="auto", metadata={"choices": ("auto", "cpu", "cuda")})
    out_dir: str = "results/{scale}/vision/runs"
    # ---- section 7 figures
    viz_image: int = field(default=0, metadata=_nonneg("index of the validation image"))
    viz_seed: int = 0
    viz_max_tokens: int = field(default=50, metadata=_pos("diagonal-masked matrices are subsampled to this"))
    analysis_dir: str = "results/{scale}/vision/analysis"
    counts_dir: str = "results/{scale}/vision/counts"

    def __post_init__(self):
        from ..config import ParamsError

        for name in self.variants:
            if name not in VARIANTS:
                raise ParamsError(f"vision.variants: unknown variant {name!r}; allowed: {', '.join(VARIANTS)}")
        if self.img_size % self.patch_size:
            raise ParamsError(f"vision.img_size={self.img_size} must be a multiple of vision.patch_size={self.patch_size}")
        if self.embed_dim % self.n_head:
            raise ParamsError(f"vision.embed_dim={self.embed_dim} must be a multiple of vision.n_head={self.n_head}")
        if not self.seeds:
            raise ParamsError("vision.seeds is empty; give at least one seed")


# ----------------------------------------------------------------------------- stages
def add_params_arguments(parser) -> None:
    """--params / --scale, as every vision stage takes them."""
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    parser.add_argument("--scale", default=None, help="scale of params.yaml (default: the file's `scale`)")


def stage_params(args):
    """load_params for a stage: a bad params file is a one-line usage error."""
    from ..config import load_params

    return load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
