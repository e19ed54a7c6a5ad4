"""Stage `kernattn train-lm`: train one run of the LM track (resumable), through the engine.

    kernattn train-lm [--params params.yaml] [--scale S] --run gka_flops-s0 [--fresh] [--stale archive]

Reads lm.data_dir (train.npy, val.npy, meta.json) and writes lm.out_dir/<run_id>/:
config.json (configuration, parameter counts, FLOPs per token, steps and why), metrics.jsonl
(a train line every step: loss in nats/token, tokens, flops, lr, elapsed_s, tokens_per_s;
val lines at step 0, every eval_every steps and at the end, their lr the last step's),
ckpt.pt, model.pt (the final weights) and, last, final.json. Resume, SIGTERM (143), divergence (exit 3, a FAILED record)
and MLflow (experiment lm.experiment) are the engine's, the same as every track's.

Steps (`plan`, from the row's `compute`, every model built on the meta device, so a run
needs no other run's outputs): null trains lm.steps (or nanochat's param:data rule on the
row's own model, see flops.base_steps); {match: tokens, row: R} the steps of row R;
{match: flops, row: R} as many steps as give R's total training FLOPs; {tokens: N} the steps
closest to N tokens. Each step is grad_accum micro-batches of
batch_size random windows of context + 1 tokens (a generator seeded from the run's seed).
Optimiser (lm.optimizer, optim.py): nanochat c7ba252's MuonAdamW with its per-group lrs,
betas, eps and scalings (muon_adamw), or one AdamW (adamw). Schedule as nanochat's: every lr
constant after a linear warmup (round(warmup_frac x steps)), then a linear warmdown over the
last round(warmdown_frac x steps) to lr x min_lr_ratio; Muon's momentum 0.85 -> 0.95 over 300
steps and its weight decay linear to 0, set each step (set_lr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...engine import ONE_PROCESS, Layout, Track, derive_seed, digest
from ...config import fingerprinted
from ...engine.options import add_run_options, run_track
from ...errors import UsageError
from ...io import atomic_torch_save
from . import flops as fl
from ...config import RunSpec
from ...config.rows import chain
from .model import GPT, GPTConfig, build_model
from .optim import apply_schedule, build_optimizer
from .stages import add_run_argument, load_stage, run_dir

VAL_WINDOWS_SEED = 31337
VAL_BATCHES = 4


def load_stream(data_dir: str | Path, split: str, context: int) -> np.ndarray:
    """The split's uint16 token stream, memory-mapped (paper scale: billions of tokens)."""
    path = Path(data_dir) / f"{split}.npy"
    if not path.is_file():
        raise UsageError(f"{path}: no such file; run `kernattn prepare-lm` first")
    arr = np.load(path, mmap_mode="r")
    if arr.dtype != np.uint16 or arr.ndim != 1 or arr.size < context + 2:
        raise UsageError(f"{path}: expected a 1-D uint16 token stream of at least {context + 2} tokens, "
                         f"got {arr.dtype} {arr.shape}; rerun `kernattn prepare-lm`")
    return arr


def batch(data: np.ndarray, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of context + 1 tokens at `starts` -> (inputs, next-token targets), int64."""
    chunk = torch.from_numpy(data[starts.numpy()[:, None] + np.arange(context + 1)].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


def lr_factor(step: int, total: int, lm) -> float:
    warm = round(lm.warmup_frac * total)  # round() as nanochat's get_lr_multiplier
    down = round(lm.warmdown_frac * total)
    if step < warm:
        return (step + 1) / warm
    if down and step >= total - down:
        frac = (total - step) / down
        return lm.min_lr_ratio + (1 - lm.min_lr_ratio) * frac
    return 1.0


def row_config(lm, vocab: int, row) -> GPTConfig:
    return GPTConfig.from_params(lm, vocab, row.variant, row.options)


def plan(lm, vocab: int, run: RunSpec) -> dict[str, Any]:
    """Parameter counts, FLOPs per token, value-embedding layers and steps of `run`, and the
    budget chain that sets its steps (its row, then the rows its compute refers to)."""
    steps = fpt = None
    budget = []
    for row in reversed(chain(lm.rows, run.row)):  # the row that sets the budget first
        model = build_model(row_config(lm, vocab, row), "meta")
        prev_steps, prev_fpt, fpt = steps, fpt, fl.flops_per_token(model)
        c = row.compute
        steps = (fl.base_steps(lm, model) if c is None else fl.token_steps(lm, c.tokens) if c.tokens is not None
                 else fl.matched_steps(prev_steps, prev_fpt["total"], fpt["total"], c.match))
        budget.insert(0, {"row": row.name, "steps": steps, "flops_per_token": fpt["total"],
                          "compute": c.describe() if c else "lm.steps" if lm.steps else "nanochat's param:data rule"})
    tps = fl.tokens_per_step(lm)
    return {"params": model.param_counts(), "flops_per_token": fpt, "steps": steps, "tokens_per_step": tps,
            "train_tokens": steps * tps, "train_flops": steps * tps * fpt["total"], "budget": budget,
            "matched": run.compute.match if run.compute else None, "value_embed_layers": model.value_embed_layers}


class LMTrack(Track):
    command, name, section_name, rate_unit = "train-lm", "lm", "lm", "tokens"

    def __init__(self, params, run: RunSpec):
        lm = params.lm
        self.params, self.run, self.section, self.experiment_section = params, run, lm, lm
        self.run_id, self.seed, self.variant = run.run_id, run.seed, run.variant
        self.run_dir = run_dir(params, run.run_id)
        self.train_data = load_stream(lm.data_dir, "train", lm.context)
        self.val_data = load_stream(lm.data_dir, "val", lm.context)
        self.meta = json.loads((Path(lm.data_dir) / "meta.json").read_text())
        self.vocab = int(self.meta["vocab_size"])
        self.info = plan(lm, self.vocab, run)
        self.max_steps = self.info["steps"]
        self.eval_every, self.checkpoint_every = lm.eval_every, lm.checkpoint_every
        self.items_per_step = self.info["tokens_per_step"]
        # global batch = batch_size x grad_accum sequences, whatever the ranks (engine/dist.py)
        self.global_batch, self.micro_default = lm.batch_size * lm.grad_accum, lm.batch_size

    @classmethod
    def repeating_layers(cls, params) -> tuple[str, int, int, int]:
        """The window pattern tiles the layers (the last always long) and value embeddings
        alternate layers, so the layers' kinds repeat every lcm(pattern, 2); the width is
        aspect_ratio x depth (kernattn.preflight.slices keeps it in the slices)."""
        lm = params.lm
        return "lm", lm.depth, math.lcm(len(lm.window_pattern), 2), lm.aspect_ratio * lm.depth

    def planned_parameters(self) -> int:
        return self.info["params"]["total"]  # plan(): counted on the meta device

    def identity(self) -> dict:
        r = self.run
        return {"run_id": r.run_id, "row": r.row, "seed": r.seed, "variant": r.variant, "options": r.options,
                "source": r.source, "label": r.label, "matched": self.info["matched"]}

    def fingerprint_config(self) -> dict:
        """The lm fields that make the weights, the run (its row and the budget its compute
        gives: not the other rows), the vocabulary and the data (meta.json records the
        sources' sha256s and the token counts)."""
        fields = fingerprinted(self.section)
        return json.loads(json.dumps({"lm": fields, "run": dataclasses.asdict(self.run), "steps": self.max_steps,
                                      "vocab": self.vocab, "data": digest(self.meta)}, default=str))

    def build(self, device: torch.device, layout: Layout = ONE_PROCESS) -> None:
        lm = self.section
        self.layout = layout
        self.model = GPT(row_config(lm, self.vocab, self.run)).to(device)
        self.device = device
        self.optimizer, self.scalings = build_optimizer(self.model, lm, self.items_per_step, device)
        self.gen = torch.Generator().manual_seed(derive_seed(self.seed, "lm-batches"))
        val_gen = torch.Generator().manual_seed(VAL_WINDOWS_SEED)
        self.val_starts = torch.randint(0, self.val_data.size - lm.context - 1, (VAL_BATCHES, lm.batch_size),
                                        generator=val_gen)

    def generators(self) -> dict:
        return {"batch": self.gen}

    def set_lr(self, step: int) -> float:
        """Every group's lr (its initial lr x the schedule), Muon's momentum and weight decay;
        the lr logged is adamw's lr, or muon_adamw's matrix lr (with its batch scaling)."""
        lm = self.section
        factor = lr_factor(step, self.max_steps, lm)
        apply_schedule(self.optimizer, step, self.max_steps, factor, self.scalings["weight_decay"])
        if lm.optimizer == "adamw":
            return lm.lr * factor
        return lm.matrix_lr * self.scalings["batch_lr_scale"] * factor

    def batch(self, step: int, micro: int):
        lm = self.section
        if micro == 0:  # the step's global batch, drawn whole on every rank; this rank trains its share
            self.starts = torch.randint(0, self.train_data.size - lm.context - 1, (self.global_batch,),
                                        generator=self.gen)
        x, y = batch(self.train_data, self.share(self.starts, micro), lm.context)
        return x.to(self.device), y.to(self.device)

    def loss(self, fwd, xy) -> torch.Tensor:
        x, y = xy
        return F.cross_entropy(fwd(x).float().reshape(-1, self.vocab), y.reshape(-1))

    def probe_input(self, rows: int | None = None) -> torch.Tensor:
        return batch(self.val_data, self.val_starts[0][:rows], self.section.context)[0].to(self.device)

    @torch.no_grad()  # without it every validation batch's graph is kept until the sum (GBs at depth 20)
    def evaluate(self, fwd, autocast) -> dict:
        self.model.eval()
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # summed nats, tokens: reduced over ranks
        for starts in self.val_share(self.val_starts.reshape(-1)).split(self.section.batch_size):
            x, y = batch(self.val_data, starts, self.section.context)
            with autocast():
                logits = self.model(x.to(self.device)).float().reshape(-1, self.vocab)
            nats = F.cross_entropy(logits, y.to(self.device).reshape(-1), reduction="none").double()
            sums += torch.stack([nats.sum(),
                                 torch.tensor(float(y.numel()), dtype=torch.float64, device=self.device)])
        self.model.train()
        total, count = self.reduce_sum(sums).tolist()
        return {"loss": total / count}

    def line_fields(self, split: str, step: int, values: dict) -> dict:
        tokens = step * self.items_per_step
        return {"loss": values["loss"], "tokens": tokens, "flops": tokens * self.info["flops_per_token"]["total"]}

    def config(self) -> dict:
        return {"run": dataclasses.asdict(self.run), "label": self.run.label, "lm": dataclasses.asdict(self.section),
                "vocab_size": self.vocab, "windows": self.model.windows,
                "optimizer": {"kind": self.section.optimizer, **self.scalings}, **self.info}

    def final(self, st) -> dict:
        info = self.info
        return {"train_tokens": info["train_tokens"], "train_flops": info["train_flops"],
                "flops_per_token": info["flops_per_token"]["total"], "n_params": info["params"]["total"],
                "params": info["params"], "value_embed_layers": info["value_embed_layers"],
                "budget": info["budget"], "val_loss": st.last_val["loss"], "train_loss": st.last_train}

    def finish(self, folder: Path) -> None:
        atomic_torch_save(folder / "model.pt", self.model.state_dict())  # what eval-lm loads

    def describe_start(self) -> str:
        i = self.info
        return (f"{i['params']['total']:,} params, {self.max_steps} steps ({i['train_tokens']:,} tokens, "
                f"{i['train_flops']:.3e} FLOPs)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_argument(parser)
    add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    params, spec = load_stage(args)
    return run_track(LMTrack(params, spec), args)


RECIPE = LMTrack  # what the engine trains for this track (kernattn.tracks.track_recipe: the preflight)
