"""What one planned job computes, in FLOPs, counted the way the benchmark counts them: each
track's own model built on the meta device (no memory, no compute) and one sample passed
through it under torch.utils.flop_counter.FlopCounterMode, forward + backward for training,
forward for evaluation. FlopCounterMode counts the matmul-shaped ops (linear, bmm, sdpa,
conv): elementwise work and the optimiser step are left out, as in MFU's usual convention.

A training job's FLOPs = steps x samples per step x (fwd + bwd of one sample) + every
evaluation's forward samples (the engine evaluates at step 0, every eval_every steps and at
the end). eval_lm's = BPB's windows of both splits + CORE's sequences (each counted at the
full context: an upper bound, the prompts being shorter).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import Params, RunSpec

# The full data sets' sizes (train, validation), for a plan made before prepare-vision ran:
# ImageNet-1k ILSVRC 2012, Fashion-MNIST, CIFAR-10/100 (their own papers and pages).
DATASET_SIZES = {"imagenet": (1_281_167, 50_000), "fashion_mnist": (60_000, 10_000),
                 "cifar10": (50_000, 10_000), "cifar100": (50_000, 10_000)}


@dataclass(frozen=True)
class Work:
    train_per_sample: float  # FLOPs of forward + backward of one sample
    eval_per_sample: float   # FLOPs of one sample's forward
    samples_per_step: int    # the global batch (micro-batches x accumulation)
    steps: int
    eval_samples: int        # forward samples over every evaluation of the job

    @property
    def flops_per_step(self) -> float:
        return self.train_per_sample * self.samples_per_step

    @property
    def total(self) -> float:
        return self.steps * self.flops_per_step + self.eval_samples * self.eval_per_sample


def evaluations(steps: int, every: int) -> int:
    """How many times the engine evaluates in `steps` steps: at 0, every `every`, and at the end."""
    return 1 + steps // every + (1 if steps % every else 0)


def count_sample(build: Callable, sample: Callable, loss: Callable, forward: Callable) -> tuple[float, float]:
    """(fwd + bwd, fwd) FLOPs of one sample of the model `build()` makes, on the meta device;
    on the CPU for a model that reads a value of its data (the free lag table checks its lags)."""
    try:
        return _count_on("meta", build, sample, loss, forward)
    except RuntimeError as exc:
        if "meta" not in str(exc):
            raise
        return _count_on("cpu", build, sample, loss, forward)


def _count_on(device: str, build: Callable, sample: Callable, loss: Callable, forward: Callable):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device(device):
        model, inputs = build(), sample()
    with FlopCounterMode(display=False) as counter:
        loss(model, inputs).backward()
    train = float(counter.get_total_flops())
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        forward(model, inputs)
    return train, float(counter.get_total_flops())


def _tokens(vocab: int, context: int):
    import torch
    return lambda: (torch.randint(0, vocab, (1, context)), torch.randint(0, vocab, (1, context)))


def _token_loss(model, xy):
    import torch.nn.functional as F
    logits = model(xy[0])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xy[1].reshape(-1))


def char_vocab(p: Params) -> int:
    """The prepared corpus's vocabulary when prepare ran, else the Dickens symbol set's size."""
    from ..bench.cases import CHAR_VOCAB
    from ..tracks.char.stages import data_dir

    path = data_dir(p) / "vocab.json"
    return len(json.loads(path.read_text())) if path.is_file() else CHAR_VOCAB


_CHAR_COUNTS: dict[str, tuple[float, float]] = {}  # one count per char model: the studies repeat the rows


def char_work(p: Params, run: RunSpec) -> Work:
    from ..tracks.char.model import GPT

    mp, tp = p.model, p.train
    vocab = char_vocab(p)
    key = json.dumps([vocab, dataclasses.asdict(mp), run.variant, run.options], sort_keys=True, default=str)
    if key not in _CHAR_COUNTS:
        _CHAR_COUNTS[key] = count_sample(lambda: GPT(vocab, mp, run.variant, run.options), _tokens(vocab, mp.context),
                                         lambda m, xy: m.loss(*xy), lambda m, xy: m(xy[0]))
    train, fwd = _CHAR_COUNTS[key]
    evals = evaluations(tp.max_steps, tp.eval_every) * tp.eval_batches * tp.batch_size
    return Work(train, fwd, tp.batch_size, tp.max_steps, evals)


def _lm_model(lm, run: RunSpec):
    from ..tracks.lm.model import build_model
    from ..tracks.lm.track import row_config

    cfg = row_config(lm, lm.vocab_size, run)
    return cfg, lambda: build_model(cfg, "meta")


def lm_counts(lm, run: RunSpec):
    """(the row's model config, fwd + bwd FLOPs, fwd FLOPs) of one full-context sequence."""
    cfg, build = _lm_model(lm, run)
    train, fwd = count_sample(build, _tokens(cfg.vocab_size, cfg.context), _token_loss, lambda m, xy: m(xy[0]))
    return cfg, train, fwd


def lm_work(p: Params, run: RunSpec) -> Work:
    from ..tracks.lm.track import VAL_BATCHES, plan

    lm = p.lm
    cfg, train, fwd = lm_counts(lm, run)
    steps = plan(lm, lm.vocab_size, run)["steps"]
    evals = evaluations(steps, lm.eval_every) * VAL_BATCHES * lm.batch_size
    return Work(train, fwd, lm.batch_size * lm.grad_accum, steps, evals)


def core_sequences(params) -> int | None:
    """CORE's sequences (one per choice or context) over its tasks; None without the eval data
    (it is not downloaded for a plan)."""
    from ..tracks.lm import core_eval as core
    from ..tracks.lm.data import eval_folder

    folder = eval_folder(params, download=False)
    if folder is None or not folder.is_dir():
        return None
    lm = params.lm
    total = 0
    for task in lm.core_fewshot:
        for item in core.load_task(folder, task, lm.core_items):
            total += len(item.choices) or len(item.contexts) or 1
    return total


def lm_eval_work(p: Params, run: RunSpec) -> Work:
    """eval-lm: BPB's windows of both splits and CORE's sequences, forward only."""
    lm = p.lm
    cfg, _, fwd = lm_counts(lm, run)
    windows = 2 * max(1, lm.bpb_tokens // cfg.context)
    return Work(0.0, fwd, 0, 0, windows + (core_sequences(p) or 0))


def vision_sizes(p: Params) -> tuple[int, int, int, int]:
    """(train images, validation images, channels, classes): the prepared data's meta.json
    when prepare-vision ran, else the data set's full size cut to train_subset / val_subset."""
    from ..bench.cases import VIT_CLASSES
    from ..tracks.vision.stages import data_output

    vp = p.vision
    meta_path = Path(data_output(p))
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        return meta["n_train"], meta["n_val"], meta["in_chans"], meta["num_classes"]
    n_train, n_val = DATASET_SIZES[vp.dataset]
    n_train, n_val = min(n_train, vp.train_subset or n_train), min(n_val, vp.val_subset or n_val)
    return n_train, n_val, 1 if vp.dataset == "fashion_mnist" else 3, VIT_CLASSES[vp.dataset]


def vision_work(p: Params, run: RunSpec) -> Work:
    import torch
    import torch.nn.functional as F

    from ..tracks.vision import model as vm

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


def prune_work(p: Params, run: RunSpec) -> Work:
    """prune@<run>: the zero- and mean-ablation of every head on the validation windows
    (2 x layers x heads + 2 evaluations), then three fine-tunings (studies.prune.stages.ARMS: pruned,
    control, random) of studies.prune.steps steps, each evaluated at its start and end.
    Removing a head saves its share of the pruned arm's FLOPs: not subtracted (an upper bound)."""
    from ..studies.prune.stages import ARMS

    full = char_work(p, run)
    tp, steps = p.train, p.studies.prune.steps
    window = tp.eval_batches * tp.batch_size
    ablations = (2 * p.model.n_layer * p.model.n_head + 2) * window
    return Work(full.train_per_sample, full.eval_per_sample, tp.batch_size, len(ARMS) * steps,
                ablations + len(ARMS) * evaluations(steps, steps) * window)


def cooldown_work(p: Params, run: RunSpec) -> Work:
    """cooldown@<run>-b<budget> (the budget sweep): the branch trains from its long run's kept
    checkpoint at cooldown_start(budget) to the budget; the steps before it are the long run's,
    counted there. Its evaluations are counted as a run of that many steps' (an upper bound by
    one: the branch starts from the long run's evaluation at its branch point)."""
    from ..config.char import cooldown_start
    from ..tracks.char.stages import split_budget_run_id

    _, budget = split_budget_run_id(run.run_id)
    tp = p.train
    full = char_work(p, run)
    steps = budget - cooldown_start(budget, tp.cooldown_fraction)
    return Work(full.train_per_sample, full.eval_per_sample, tp.batch_size, steps,
                evaluations(steps, tp.eval_every) * tp.eval_batches * tp.batch_size)


TRAINING = {"char": char_work, "lm": lm_work, "vision": vision_work}  # a track's training run

# The planned stages: name -> (track, how its work is counted); track None: each run's own
# (the GKA-init study trains a row of each track, counted as that track's training run).
# Not planned: the benchmark and the extrapolation stages (forward passes of a few windows per
# run: at paper scale under 1e-5 of the DAG's FLOPs) and every stage that trains nothing.
WORK = {"train": ("char", char_work), "cooldown": ("char", cooldown_work), "train_lm": ("lm", lm_work),
        "train_vision": ("vision", vision_work), "eval_lm": ("lm", lm_eval_work),
        "train_wrap": ("char", char_work), "train_gka_init": (None, None), "prune": ("char", prune_work)}
STUDY_OF = {"train_wrap": "wrap", "train_gka_init": "gka_init", "prune": "prune"}  # the studies' planned stages


@dataclass(frozen=True)
class PlannedRun:
    track: str      # whose model it trains (its MFU, its input pipeline)
    spec: RunSpec
    study: str = ""  # the study it belongs to ("" for the main DAG)
    budget: int | None = None  # a cooldown branch's budget: its work differs from its row's other branches'

    def work(self, p: Params, stage: str) -> Work:
        fn = WORK[stage][1] or TRAINING[self.track]
        return fn(p, self.spec)


def stage_runs(p: Params, stage: str) -> dict[str, PlannedRun]:
    """The runs of a planned stage by run id."""
    from ..config import find_run
    from ..studies.gka_init.stages import gka_runs
    from ..studies.prune.stages import prune_runs
    from ..studies.wrap.stages import wrap_runs
    from ..tracks import track_module

    study = STUDY_OF.get(stage, "")
    if stage == "cooldown":
        from ..tracks.char.stages import budget_runs, split_budget_run_id

        branches = {b: split_budget_run_id(b) for b in budget_runs(p)}
        return {b: PlannedRun("char", dataclasses.replace(find_run(p, run_id), run_id=b), budget=budget)
                for b, (run_id, budget) in branches.items()}
    if stage == "train_wrap":
        return {r: PlannedRun("char", spec, study) for r, (_corpus, spec) in wrap_runs(p).items()}
    if stage == "train_gka_init":
        return {r: PlannedRun(run.track, run.spec, study) for r, run in gka_runs(p).items()}
    if stage == "prune":
        return {r: PlannedRun("char", find_run(p, r), study) for r in prune_runs(p)}
    track = WORK[stage][0]
    return {r.run_id: PlannedRun(track, r) for r in track_module(track, "stages").runs(p)}
