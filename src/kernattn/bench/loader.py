"""`kernattn bench-loader`: images/s per CPU worker of the ViT input pipeline (issue 24, item 6).

The paper-scale vision track reads ImageNet JPEGs and augments them with DeiT's recipe (random
resized crop, flip, RandAugment, random erasing; mixup/cutmix on the batch). One DataLoader
worker is one process on one core, so a pipeline timed in this process with one torch thread
gives images/s per worker. Measured, each on the same images:

    timm-pil    PIL decode + timm's create_transform (tracks.vision.data.imagenet_transform:
                what the vision track runs on ImageNet)
    tv2-uint8   torchvision.io.decode_jpeg + transforms.v2 on uint8 tensors
                (tracks.vision.data.tensor_transforms with the same recipe)
    mixup       timm's Mixup/CutMix on a batch of augmented images (the training loop applies it
                to the batch, on the GPU at paper scale: shown apart, per image)

on JPEGs this command writes (PIL-encoded, quality 90, ImageNet's typical 500 x 375 and
other sizes around it) and, with --fashion, on the Fashion-MNIST mirror (28 px uint8 tensors,
no decode: the tiny scale's in-memory path with the paper's augmentations at 28 px).
DALI (GPU decode, NVIDIA GPUs only) and FFCV (its own dataset format) cannot run on this
CPU-only machine: they are not measured.

Writes <out> (CSV: SCHEMA) atomically and prints it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
import time
from pathlib import Path

import torch

from .timing import device_name, utc_timestamp
from .typed_csv import write_csv_atomic

# images_per_s: per CPU-second of one worker (cpu_seconds), the rate of a dedicated core
SCHEMA = {"pipeline": str, "source": str, "images": int, "seconds": float, "cpu_seconds": float, "images_per_s": float,
          "img_size": int, "threads": int, "device": str, "torch": str, "timestamp": str}
# JPEG sizes (w, h): ImageNet's most common 500 x 375, its portrait, and smaller and larger ones
SIZES = ((500, 375), (375, 500), (500, 333), (320, 240), (640, 480))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jpegs", type=int, default=64, metavar="N", help="JPEGs to write and read (default 64)")
    parser.add_argument("--fashion", default=None, metavar="DIR",
                        help="a Fashion-MNIST mirror folder to time as well (e.g. the data cache's images/fashion_mnist)")
    parser.add_argument("--reps", type=int, default=2, metavar="R", help="passes over the images; the best is kept")
    parser.add_argument("--out", default="results/bench/loader.csv", metavar="CSV", help="where to write the rows")


def write_jpegs(folder: Path, n: int, seed: int = 0) -> list[Path]:
    """n JPEGs of smooth random content (low-frequency noise, as photos are: pure noise would
    not compress and would decode slower than any photo)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        w, h = SIZES[i % len(SIZES)]
        coarse = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(coarse).resize((w, h), Image.BICUBIC)
        path = folder / f"{i:05d}.jpg"
        img.save(path, quality=90)
        paths.append(path)
    return paths


def recipe(params) -> object:
    """The paper scale's vision section: DeiT's augmentations at 224 px on ImageNet."""
    from ..config import load_params

    # without params.overrides: they were resolved at the command's scale, and this is the
    # paper's recipe, the one the per-worker rate stands for (dag/plan.py reads it)
    return load_params(params.path, "paper").vision


def _best(run, reps: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the pass of `run` with the least CPU time of `reps` (the first
    warms caches and imports). One thread: this process's CPU time is what one dedicated core
    spends, whatever else shares the machine (wall time counts the others' load too)."""
    best = (float("inf"), float("inf"))
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        run()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        best = min(best, (wall, cpu), key=lambda t: t[1])
    return best


def pipelines(vp, paths: list[Path]) -> dict:
    """name -> a function processing every path once."""
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_jpeg, read_file

    from ..tracks.vision.data import imagenet_transform, tensor_transforms

    pil, tv2 = imagenet_transform(vp, True), tensor_transforms(vp, True)

    def timm_pil():
        for p in paths:
            with Image.open(p) as img:
                pil(img.convert("RGB"))

    def tv2_uint8():
        for p in paths:
            tv2(decode_jpeg(read_file(str(p)), mode=ImageReadMode.RGB))
    return {"timm-pil": timm_pil, "tv2-uint8": tv2_uint8}


def mixup_run(vp, n: int):
    """Mixup/CutMix of n augmented-sized images, in batches of vp.batch_size (or fewer)."""
    from ..tracks.vision.track import make_loss

    mix, _ = make_loss(vp, 1000)
    batch = max(2, min(vp.batch_size, n) // 2 * 2)  # timm's Mixup wants an even batch
    x, y = torch.randn(batch, 3, vp.img_size, vp.img_size), torch.randint(0, 1000, (batch,))

    def run():
        for _ in range(max(1, n // batch)):
            mix(x.clone(), y)
    return run, max(1, n // batch) * batch


def fashion_run(vp, root: str, n: int):
    """The paper's augmentations at 28 px on n Fashion-MNIST images (uint8 tensors in memory)."""
    from ..tracks.vision.data import load_fashion, tensor_transforms

    fvp = dataclasses.replace(vp, dataset="fashion_mnist", data_root=root, img_size=28, train_subset=n, download=False)
    images = load_fashion(fvp)[0]["images"]
    tf = tensor_transforms(fvp, True)

    def run():
        for img in images:
            tf(img)
    return run, len(images)


def measure(params, n_jpegs: int, fashion: str | None, reps: int) -> list[dict]:
    vp = recipe(params)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # one DataLoader worker
    rows = []

    def row(pipeline, source, run, items, size):
        wall, cpu = _best(run, reps)
        rows.append({"pipeline": pipeline, "source": source, "images": items, "seconds": wall, "cpu_seconds": cpu,
                     "images_per_s": items / cpu, "img_size": size, "threads": 1,
                     "device": device_name(torch.device("cpu")), "torch": torch.__version__,
                     "timestamp": utc_timestamp()})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_jpegs(Path(tmp), n_jpegs)
            for name, run in pipelines(vp, paths).items():
                row(name, f"jpeg {n_jpegs} x ~500x375", run, len(paths), vp.img_size)
        run, items = mixup_run(vp, n_jpegs)
        row("mixup", f"batch of {vp.img_size}px tensors", run, items, vp.img_size)
        if fashion:
            run, items = fashion_run(vp, fashion, n_jpegs)
            row("tv2-uint8", "fashion_mnist mirror (28 px, no decode)", run, items, 28)
    finally:
        torch.set_num_threads(before)
    return rows


def cores_per_gpu(gpu_images_per_s: float, worker_images_per_s: float) -> int:
    """CPU cores one GPU's training needs to stay GPU-bound: the loader workers that produce its
    images/s, and one for the training process itself."""
    return math.ceil(gpu_images_per_s / worker_images_per_s) + 1


def run(args: argparse.Namespace) -> int:
    from ..config import params_from_args
    from ..errors import UsageError

    if args.jpegs < 2 or args.reps < 1:
        raise UsageError(f"--jpegs {args.jpegs} --reps {args.reps}: need at least 2 images and 1 pass")
    if args.fashion and not Path(args.fashion).is_dir():
        raise UsageError(f"--fashion {args.fashion}: no such folder (the Fashion-MNIST mirror's)")
    rows = measure(params_from_args(args), args.jpegs, args.fashion, args.reps)
    write_csv_atomic(Path(args.out), SCHEMA, rows)
    for r in rows:
        print(f"{r['pipeline']:>10} {r['source']:<42} {r['images_per_s']:9.1f} img/s per worker")
    print(f"wrote {args.out}")
    return 0
