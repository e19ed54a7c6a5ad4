"""Vision data: Fashion-MNIST (idx files), CIFAR-10/100 (torchvision), ImageNet-1k (ImageFolder).

    kernattn prepare-vision [--params P] [--scale S]

writes vision.data_dir/ atomically (the folder appears whole or not at all):
  meta.json              dataset, classes, channels, image counts, sha256 of the sources
  train.pt, val.pt       (in-memory datasets) {"images": uint8 [N, C, H, W], "labels": int64 [N]}
ImageNet is not copied: meta.json records the ImageFolder root and its classes, and training
reads the folder itself.

Fashion-MNIST is read from `vision.data_root` when set (your folder with the four original idx
.gz files), else from the catalogue's fashion-mnist (kernattn.datasets: the data mirror, the
cache, or a verified download from the authors' site). Either way each file's decompressed
content must match its pinned sha256 (the idx files are byte-identical upstream and in the
Debian mirror, whose gzip headers differ). ImageNet is always the user's folder (data_root).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ...errors import UsageError
from ...datasets import Where, dataset, locate_folder
from ...fetch import DataError, read_local
from ...io import atomic_dir
from ...config import params_from_args


# sha256 of each file's decompressed idx content (shared/data/README.md).
FASHION_FILES = {
    "train-images-idx3-ubyte.gz": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte.gz": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte.gz": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte.gz": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                   "Bag", "Ankle boot")
# Per-channel mean / std used to normalise inputs.
STATS = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
IN_MEMORY = ("fashion_mnist", "cifar10", "cifar100")
# (input channels, classes) of each data set: what a model needs before any data is read.
SHAPES = {"fashion_mnist": (1, 10), "cifar10": (3, 10), "cifar100": (3, 100), "imagenet": (3, 1000)}


# ----------------------------------------------------------------------------- idx files
def parse_idx(data: bytes, name: str) -> np.ndarray:
    """IDX (big-endian): magic 0x0000 08 NDIM (uint8), NDIM int32 sizes, then the values."""
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise DataError(f"{name}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    ndim = data[3]
    dims = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise DataError(f"{name}: {body.size} values, header says {dims}; the file is truncated")
    return body.reshape(dims)


def fashion_file(root: str | Path, name: str) -> tuple[np.ndarray, str]:
    """One Fashion-MNIST idx file, verified against its pinned content sha256."""
    want = FASHION_FILES[name]
    src = read_local(Path(root) / name, " (vision.data_root must hold the four Fashion-MNIST idx .gz files)")
    if src.content_sha256 != want:
        raise DataError(f"{src.source}: content sha256 {src.content_sha256[:16]}... is not Fashion-MNIST's "
                        f"{want[:16]}...; the file is corrupt or another data set")
    return parse_idx(src.data, src.source), want


def _subset(images: np.ndarray, labels: np.ndarray, n: int | None):
    return (images[:n], labels[:n]) if n is not None else (images, labels)


def load_fashion(vp, where: Where | None = None) -> tuple[dict, dict, dict]:
    root = vp.data_root or locate_folder(dataset("fashion-mnist").files, where or Where.from_params())
    arrays, sums = {}, {}
    for name in FASHION_FILES:
        arrays[name], sums[name] = fashion_file(root, name)
    out = {}
    for split, prefix, n in (("train", "train", vp.train_subset), ("val", "t10k", vp.val_subset)):
        imgs, labels = _subset(arrays[f"{prefix}-images-idx3-ubyte.gz"], arrays[f"{prefix}-labels-idx1-ubyte.gz"], n)
        out[split] = {"images": torch.from_numpy(imgs.copy())[:, None], "labels": torch.from_numpy(labels.astype(np.int64))}
    return out["train"], out["val"], {"classes": list(FASHION_CLASSES), "sha256": sums}


def load_cifar(vp) -> tuple[dict, dict, dict]:
    from torchvision import datasets

    cls = datasets.CIFAR10 if vp.dataset == "cifar10" else datasets.CIFAR100
    root = vp.data_root or "data/cifar"
    out = {}
    for split, train, n in (("train", True, vp.train_subset), ("val", False, vp.val_subset)):
        try:
            ds = cls(root, train=train, download=vp.download)
        except RuntimeError as exc:
            raise DataError(f"{root}: {vp.dataset} not found ({str(exc).splitlines()[0]}); set vision.download: "
                            f"true or point vision.data_root to torchvision's CIFAR folder") from None
        imgs, labels = _subset(np.asarray(ds.data), np.asarray(ds.targets), n)
        out[split] = {"images": torch.from_numpy(imgs.copy()).permute(0, 3, 1, 2).contiguous(),
                      "labels": torch.from_numpy(labels.astype(np.int64))}
    return out["train"], out["val"], {"classes": list(ds.classes), "sha256": {}}


def imagenet_folders(vp):
    """(train, val) torchvision ImageFolders under vision.data_root, with a one-line error."""
    from torchvision import datasets

    if vp.data_root is None:
        raise DataError("vision.data_root is null; point it to the ImageNet folder holding train/ and val/")
    folders = []
    for split in ("train", "val"):
        path = Path(vp.data_root) / split
        if not path.is_dir():
            raise DataError(f"{path}: no such folder; vision.data_root must hold train/ and val/ in ImageFolder layout")
        try:
            folders.append(datasets.ImageFolder(str(path)))
        except (FileNotFoundError, RuntimeError) as exc:
            raise DataError(f"{path}: no class folders with images ({str(exc).splitlines()[0]}); "
                            f"expected {path}/<class>/<image>.JPEG") from None
    return folders


# ----------------------------------------------------------------------------- prepare
def prepare(vp, where: Where | None = None) -> Path:
    out = Path(vp.data_dir)
    meta = {"dataset": vp.dataset, "train_subset": vp.train_subset, "val_subset": vp.val_subset}
    with atomic_dir(out) as tmp:
        if vp.dataset in IN_MEMORY:
            train, val, info = load_fashion(vp, where) if vp.dataset == "fashion_mnist" else load_cifar(vp)
            torch.save(train, tmp / "train.pt")
            torch.save(val, tmp / "val.pt")
            h = hashlib.sha256()
            for part in (train, val):
                h.update(part["images"].numpy().tobytes())
                h.update(part["labels"].numpy().tobytes())
            meta |= {"in_chans": int(train["images"].shape[1]), "image_size": int(train["images"].shape[-1]),
                     "n_train": len(train["labels"]), "n_val": len(val["labels"]), "digest": h.hexdigest()[:16],
                     **info}
        else:
            tr, va = imagenet_folders(vp)
            meta |= {"in_chans": 3, "root": str(Path(vp.data_root).resolve()), "classes": tr.classes,
                     "n_train": len(tr), "n_val": len(va), "sha256": {},
                     "digest": hashlib.sha256(json.dumps([tr.classes, len(tr), len(va)]).encode()).hexdigest()[:16]}
        meta["num_classes"] = len(meta["classes"])
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def read_meta(vp) -> dict:
    path = Path(vp.data_dir) / "meta.json"
    if not path.is_file():
        raise UsageError(f"{path}: no such file; run `kernattn prepare-vision` first")
    return json.loads(path.read_text())


def load_split(vp, split: str) -> dict:
    path = Path(vp.data_dir) / f"{split}.pt"
    if not path.is_file():
        raise UsageError(f"{path}: no such file; run `kernattn prepare-vision` first")
    return torch.load(path, weights_only=True)


# ----------------------------------------------------------------------------- datasets
class TensorImages(torch.utils.data.Dataset):
    """uint8 [N, C, H, W] images with a per-image transform (torchvision v2 on tensors)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


def tensor_transforms(vp, train: bool):
    """The DeiT augmentations on uint8 tensors: random resized crop (bicubic), flip,
    RandAugment(n, m), normalise, random erasing; evaluation resizes (if needed) and normalises."""
    from torchvision.transforms import InterpolationMode, v2

    mean, std = STATS[vp.dataset]
    resize = [v2.Resize(vp.img_size, interpolation=InterpolationMode.BICUBIC, antialias=True),
              v2.CenterCrop(vp.img_size)]
    if train:
        steps = [v2.RandomResizedCrop(vp.img_size, scale=(vp.crop_scale_min, 1.0),
                                      interpolation=InterpolationMode.BICUBIC, antialias=True)
                 if vp.crop_scale_min < 1 else resize[0]]
        if vp.hflip:
            steps.append(v2.RandomHorizontalFlip())
        if vp.rand_augment_n > 0:
            steps.append(v2.RandAugment(num_ops=vp.rand_augment_n, magnitude=vp.rand_augment_m))
    else:
        steps = resize
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    if train and vp.random_erasing > 0:
        steps.append(v2.RandomErasing(p=vp.random_erasing))
    return v2.Compose(steps)


def imagenet_transform(vp, train: bool):
    """timm's DeiT transforms (PIL): RRC, flip, rand-m{m}-n{n}-mstd0.5-inc1, random erasing."""
    from timm.data import create_transform

    aa = f"rand-m{vp.rand_augment_m}-n{vp.rand_augment_n}-mstd0.5-inc1" if vp.rand_augment_n > 0 else None
    if train:
        return create_transform(vp.img_size, is_training=True, scale=(vp.crop_scale_min, 1.0),
                                hflip=0.5 if vp.hflip else 0.0, auto_augment=aa, interpolation="bicubic",
                                re_prob=vp.random_erasing, re_mode="pixel", mean=STATS["imagenet"][0],
                                std=STATS["imagenet"][1])
    return create_transform(vp.img_size, is_training=False, interpolation="bicubic", crop_pct=0.875,
                            mean=STATS["imagenet"][0], std=STATS["imagenet"][1])


def datasets_for(vp, train_transform: bool = True):
    """(train, val) torch Datasets for the prepared data."""
    if vp.dataset in IN_MEMORY:
        tr, va = load_split(vp, "train"), load_split(vp, "val")
        return (TensorImages(tr["images"], tr["labels"], tensor_transforms(vp, train_transform)),
                TensorImages(va["images"], va["labels"], tensor_transforms(vp, False)))
    try:
        tr, va = imagenet_folders(vp)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    tr.transform, va.transform = imagenet_transform(vp, train_transform), imagenet_transform(vp, False)
    return tr, va


# ----------------------------------------------------------------------------- preflight stand-in
def stand_in(p, folder) -> tuple[dict, dict]:
    """Write random images in `folder` in the data set's prepared form (train.pt/val.pt, or for
    ImageNet an ImageFolder and its meta.json through `prepare`), with the data set's channels and
    classes (SHAPES), so that `kernattn preflight` can build and step a model at the real image
    size with no data; returns the params overrides that read them (with no loader workers), and
    those that train the smallest batch a step (one image; two under Mixup/CutMix).
    The training split holds as many images as the configured batch (a step's worth), one per
    class at least; validation one image."""
    import dataclasses

    vp = p.vision
    root = Path(folder)
    chans, classes = SHAPES[vp.dataset]
    n_train = max(classes, vp.batch_size)
    gen = torch.Generator().manual_seed(0)
    over = {"data_dir": str(root / "prepared"), "workers": 0}
    # timm's Mixup/CutMix pairs each image with another of its batch: it needs an even batch
    smallest = 2 if vp.mixup > 0 or vp.cutmix > 0 else 1
    one = {"vision": {"batch_size": smallest, "micro_batch": None}}
    if vp.dataset in IN_MEMORY:
        out = root / "prepared"
        out.mkdir(parents=True, exist_ok=True)
        for split, n in (("train", n_train), ("val", 1)):
            torch.save({"images": torch.randint(0, 256, (n, chans, vp.img_size, vp.img_size), dtype=torch.uint8,
                                                generator=gen),
                        "labels": torch.arange(n) % classes}, out / f"{split}.pt")
        meta = {"dataset": vp.dataset, "in_chans": chans, "image_size": vp.img_size, "n_train": n_train, "n_val": 1,
                "digest": "stand-in", "classes": [str(c) for c in range(classes)], "sha256": {},
                "num_classes": classes}
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        return {"vision": over}, one
    from PIL import Image

    pixels = torch.randint(0, 256, (16, 16, chans), dtype=torch.uint8, generator=gen).numpy()
    for split, n in (("train", n_train), ("val", 1)):
        for i in range(n):
            folder_i = root / split / f"class{i % classes:04d}"
            folder_i.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(folder_i / f"{i}.JPEG")
    over["data_root"] = str(root)
    prepare(dataclasses.replace(vp, data_root=over["data_root"], data_dir=over["data_dir"]))
    return {"vision": over}, one


# ----------------------------------------------------------------------------- stage
def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    try:
        out = prepare(params.vision, Where.from_params(params))
    except DataError as exc:
        raise UsageError(str(exc)) from None
    meta = json.loads((out / "meta.json").read_text())
    print(f"kernattn prepare-vision: {meta['dataset']}: {meta['n_train']} train / {meta['n_val']} val images, "
          f"{meta['num_classes']} classes -> {out}")
    return 0
