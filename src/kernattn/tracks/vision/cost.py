"""What `kernattn plan` counts of the vision track's jobs (kernattn.work): a ViT training run,
every validation scoring the model and its EMA on the whole validation set. A ViT on ImageNet
JPEGs may be held back by its CPU decoders instead: its runs name their loader workers, and the
plan bounds them with bench-loader's measured images per second. torch only inside the counter."""

from __future__ import annotations

import json
from pathlib import Path

from ...config import Params, RunSpec
from ...work import PlannedRun, Work, count_sample, evaluations, row_tables
from .stages import NAME, data_output, runs

# The full data sets' sizes (train, validation), for a plan made before prepare-vision ran:
# ImageNet-1k ILSVRC 2012, Fashion-MNIST, CIFAR-10/100 (their own papers and pages).
DATASET_SIZES = {"imagenet": (1_281_167, 50_000), "fashion_mnist": (60_000, 10_000),
                 "cifar10": (50_000, 10_000), "cifar100": (50_000, 10_000)}


def vision_sizes(p: Params) -> tuple[int, int, int, int]:
    """(train images, validation images, channels, classes): the prepared data's meta.json
    when prepare-vision ran, else the data set's full size cut to train_subset / val_subset."""
    from .data import SHAPES

    vp = p.vision
    meta_path = Path(data_output(p))
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        return meta["n_train"], meta["n_val"], meta["in_chans"], meta["num_classes"]
    n_train, n_val = DATASET_SIZES[vp.dataset]
    n_train, n_val = min(n_train, vp.train_subset or n_train), min(n_val, vp.val_subset or n_val)
    return n_train, n_val, *SHAPES[vp.dataset]


def train_work(p: Params, run: RunSpec) -> Work:
    import torch
    import torch.nn.functional as F

    from . import model as vm

    vp = p.vision
    n_train, n_val, chans, classes = vision_sizes(p)
    spec = vm.spec_from_params(vp, run.variant, chans, classes, run.options)
    train, fwd = count_sample(lambda: vm.build_vit(spec),
                              lambda: (torch.randn(1, chans, vp.img_size, vp.img_size), torch.zeros(1, dtype=torch.long)),
                              lambda m, xy: F.cross_entropy(m(xy[0]).float(), xy[1]), lambda m, xy: m(xy[0]))
    spe = n_train // vp.batch_size
    steps = vp.epochs * spe
    # every validation scores the model and its EMA on the whole validation set
    evals = evaluations(steps, vp.eval_every * spe) * 2 * n_val
    return Work(train, fwd, vp.batch_size, steps, evals)


def loader_workers(p: Params) -> int:
    """CPU decoders per GPU where they may bound a run: ImageNet's JPEGs (the small sets are
    tensors in memory)."""
    return p.vision.workers if p.vision.dataset == "imagenet" else 0


def planned_run(p: Params, spec: RunSpec, study: str = "") -> PlannedRun:
    """A training run of this track's model (a study's too), as the plan counts it."""
    return PlannedRun(NAME, spec, train_work, study, paper=row_tables(p.vision.rows, spec.row),
                      loader_workers=loader_workers(p))


PLAN_SECTIONS = ("vision",)  # what the counts above read


def plan_inputs(p: Params) -> list[str]:
    """The prepared data set's meta.json: its images and classes size the run."""
    return [data_output(p)]


PLANNED = {"train_vision": lambda p: {r.run_id: planned_run(p, r) for r in runs(p)}}  # the stages `kernattn plan` counts
