"""Train one run of the experiment matrix: a char-level GPT with the run's attention variant.

    kernattn train --params params.yaml [--scale S] --run <run_id> [--fresh] [--stale archive]

<run_id> is '<row>-s<seed>' from params.yaml's matrix (e.g. rope-s0). Reads the prepared
corpus (data.out_dir: train.npy, val.npy as uint8 token ids, vocab.json) and writes the run
folder train.out_dir/<run_id>/ (config.json, metrics.jsonl, ckpt.pt, final.json last) through
the engine (kernattn.engine), which gives every track the same promises: resume bit-exact on
CPU, SIGTERM -> checkpoint + exit 143, a divergence -> exit 3 with one line and a FAILED
record, stale folders refused or archived, MLflow that never blocks training.

This module is the char track's recipe. metrics.jsonl lines: {"step", "split", "loss", "bpc",
"tokens", "lr", "elapsed_s", "tokens_per_s"} (lr: the engine's, the step's rate on a train line,
the last step's on a val line); val lines at step 0, every eval_every steps and
at max_steps; train lines every max(1, eval_every // 10) steps and at max_steps, `loss` the
mean training loss since the previous train line. loss = mean cross-entropy in nats per
character; bpc = loss / ln 2; tokens = step x batch_size x context; tokens_per_s = training
tokens per second of pure training time (the interval's on train lines, the run's on val lines).

Training: AdamW (weight decay on nn.Linear weights only, see GPT.param_groups), lr linear
warmup over warmup_steps then cosine to lr x min_lr_ratio at max_steps, gradient clipping at
grad_clip (0: off). CPU: float32, eager; CUDA: bf16 autocast (train.dtype), torch.compile
(train.compile), fused AdamW. Batches are random windows of context + 1 characters drawn by
their own generator (seeded from the run's seed; its state is in the checkpoint); validation
scores eval_batches x batch_size fixed windows (VAL_SEED), the same characters for every eval
of every run and for the analyses that re-score a model.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

import torch
import torch.nn.functional as F

from ...config import Params, RunSpec, find_run, fingerprinted, params_from_args
from ...config.char import cooldown_start
from ...engine import ONE_PROCESS, Layout, Track, derive_seed, is_timing, train_run
from ...engine.options import add_run_options, run_track
from .data import load_data, loss_sums, split_starts, validation_starts, windows
from .stages import budget_dir, budget_run_id, data_dir, run_dir

FINAL_KEYS = (
    "run_id", "row", "seed", "variant", "options", "label", "source",
    "val_loss", "val_bpc", "train_loss", "n_params", "extra_params", "tokens_seen", "steps",
    "wall_s", "tokens_per_s", "device", "mlflow_run_id", "mlflow_experiment_id", "tracking_uri", "git_commit",
    "params_digest", "scale",
    # beyond the list the pipeline relies on:
    "n_params_non_embedding", "train_s", "fingerprint", "track",
    # issue 37: the whole validation split's loss and its sampling error, the run's budget and lr factor
    "val_loss_sample", "val_loss_se", "val_windows", "val_chars", "budget", "variant_lr_scale", "n_variant_params",
)
METRIC_KEYS = ("step", "split", "loss", "bpc", "tokens", "lr", "elapsed_s", "tokens_per_s")
TIMING_KEYS = tuple(k for k in METRIC_KEYS if is_timing(k))
# train.* fields that change neither the weights nor the metrics: not in the fingerprint.
LN2 = math.log(2.0)


def lr_at(step: int, tp, budget: int | None = None) -> float:
    """Learning rate of optimizer step `step` (0-based) of a run of `budget` steps (None:
    train.max_steps): linear warmup, then train.schedule: cosine to lr x min_lr_ratio, or wsd
    (the lr held, then linear to lr x min_lr_ratio over the last cooldown_fraction)."""
    if step < tp.warmup_steps:
        return tp.lr * (step + 1) / tp.warmup_steps
    end, floor = budget or tp.max_steps, tp.lr * tp.min_lr_ratio
    if tp.schedule == "wsd":
        start = cooldown_start(end, tp.cooldown_fraction)
        if step < start:
            return tp.lr
        return tp.lr + (floor - tp.lr) * min(1.0, (step - start + 1) / max(1, end - start))
    span = max(1, end - tp.warmup_steps)
    progress = min(1.0, (step - tp.warmup_steps) / span)
    return floor + 0.5 * (tp.lr - floor) * (1.0 + math.cos(math.pi * progress))


def variant_lr_scale(spec: RunSpec, tp) -> float:
    """The factor of the variant-owned parameters' lr for this run: its row's, else train's."""
    return tp.variant_lr_scale if spec.variant_lr_scale is None else spec.variant_lr_scale


# ============================================================================ the recipe
class CharTrack(Track):
    command, name, section_name, rate_unit = "train", "char", "train", "tokens"

    def __init__(self, params: Params, run: RunSpec, budget: int | None = None):
        """`budget`: one of train.budgets: the run's cooldown branched at that budget
        (kernattn cooldown; its own folder, `budget_dir`), else the run of train.max_steps."""
        tp, mp = params.train, params.model
        self.params, self.run, self.section, self.experiment_section = params, run, tp, params.tracking
        self.seed, self.variant, self.budget = run.seed, run.variant, budget
        self.run_id = run.run_id if budget is None else budget_run_id(run.run_id, budget)
        self.run_dir = run_dir(params, run.run_id) if budget is None else budget_dir(params, run.run_id, budget)
        self.data = load_data(data_dir(params), mp.context)
        self.max_steps, self.eval_every, self.checkpoint_every = budget or tp.max_steps, tp.eval_every, tp.checkpoint_every
        self.keep_at = () if budget is not None else tuple(cooldown_start(b, tp.cooldown_fraction) for b in tp.budgets)
        self.lr_scale = variant_lr_scale(run, tp)
        self.log_every = max(1, tp.eval_every // 10)
        self.items_per_step = tp.batch_size * mp.context
        self.global_batch = tp.batch_size  # split over ranks and micro-batches by the engine

    def identity(self) -> dict:
        s = self.run
        return {"run_id": self.run_id, "row": s.row, "seed": s.seed, "variant": s.variant, "options": s.options,
                "label": s.label, "source": s.source, "budget": self.max_steps,
                "variant_lr_scale": self.lr_scale}

    def fingerprint_config(self) -> dict:
        s, d = self.run, self.data
        # a branch is the run of its budget (same weights bit for bit): its own max_steps, no
        # budgets of its own; a row's lr scale replaces train's (a row without one: unchanged)
        train = {**fingerprinted(self.section), "variant_lr_scale": self.lr_scale,
                 **({"max_steps": self.budget, "budgets": []} if self.budget is not None else {})}
        return {"run": {"run_id": s.run_id, "variant": s.variant, "options": s.options, "seed": s.seed},
                "model": dataclasses.asdict(self.params.model), "train": train,
                "data": {"vocab_size": d.vocab_size, "train_tokens": int(d.train.numel()),
                         "val_tokens": int(d.val.numel()), "digest": d.digest}}

    def build(self, device: torch.device, layout: Layout = ONE_PROCESS) -> None:
        from .model import GPT

        tp, mp, d = self.section, self.params.model, self.data
        self.layout = layout
        self.model = GPT(d.vocab_size, mp, self.run.variant, self.run.options).to(device)
        self.optimizer = torch.optim.AdamW(self.model.param_groups(tp.weight_decay, self.lr_scale), lr=tp.lr,
                                           betas=(tp.beta1, tp.beta2),
                                           **({"fused": True} if device.type == "cuda" else {}))
        self.batch_gen = torch.Generator().manual_seed(derive_seed(self.seed, "batches"))
        self.val_starts = validation_starts(d.val.numel(), mp.context, tp.eval_batches, tp.batch_size)
        self.train_data, self.val_data = d.train.to(device), d.val.to(device)

    def generators(self) -> dict:
        return {"batch": self.batch_gen}

    def rate(self, step: int) -> float:
        """The schedule's rate of step `step` (before the groups' scales)."""
        return lr_at(step, self.section, self.max_steps)

    def set_lr(self, step: int) -> float:
        lr = self.rate(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        return lr

    def batch(self, step: int, micro: int):
        if micro == 0:  # the step's global batch, drawn whole on every rank; this rank trains its share
            n_starts = self.train_data.numel() - self.params.model.context
            self.starts = torch.randint(0, n_starts, (self.section.batch_size,), generator=self.batch_gen)
        return windows(self.train_data, self.share(self.starts, micro), self.params.model.context)

    def loss(self, fwd, batch) -> torch.Tensor:
        x, y = batch
        logits = fwd(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    def probe_input(self, rows: int | None = None) -> torch.Tensor:
        return windows(self.val_data, self.val_starts[0][:rows], self.params.model.context)[0]

    def evaluate(self, fwd, autocast) -> dict:
        total, count, _, _ = self._score(fwd, autocast, self.val_starts.reshape(-1))
        return {"loss": total / count, "bpc": total / count / LN2}

    def _score(self, fwd, autocast, starts: torch.Tensor) -> list[float]:
        """loss_sums over `starts` (every rank its share, summed over ranks)."""
        mine = self.val_share(starts).split(self.section.batch_size)
        return self.reduce_sum(loss_sums(fwd, self.model, self.val_data, mine, self.params.model.context,
                                         autocast)).tolist()

    def final_evaluate(self, fwd, autocast) -> dict:
        """train.final_eval "split": every non-overlapping window of the validation split, with
        the standard error of its mean over those windows (the evaluation's own sampling error:
        what a verdict's seed interval is conditional on)."""
        if self.section.final_eval != "split":
            return {}
        starts = split_starts(self.val_data.numel(), self.params.model.context)
        total, count, squares, n = self._score(fwd, autocast, starts)
        mean = total / count  # every window has `context` characters: also the mean of window means
        se = math.sqrt(max(squares - n * mean * mean, 0.0) / (n - 1) / n) if n > 1 else None
        return {"val_loss": mean, "val_bpc": mean / LN2, "val_loss_se": se, "val_windows": int(n),
                "val_chars": int(count)}

    def line_fields(self, split: str, step: int, values: dict) -> dict:
        return {"loss": values["loss"], "bpc": values["loss"] / LN2, "tokens": step * self.items_per_step}

    def config(self) -> dict:
        d, m = self.data, self.model
        return {"run": dataclasses.asdict(self.run), "model": dataclasses.asdict(self.params.model),
                "train": dataclasses.asdict(self.section),
                "data": {"out_dir": d.out_dir, "vocab_size": d.vocab_size, "train_tokens": int(d.train.numel()),
                         "val_tokens": int(d.val.numel()), "digest": d.digest},
                "n_params": m.num_params(), "n_params_non_embedding": m.num_params(non_embedding=True),
                "extra_params": m.extra_params()}

    def final(self, st) -> dict:
        m, tokens = self.model, st.step * self.items_per_step
        split = st.final_values or {}
        return {"val_loss": st.last_val["loss"], "val_bpc": st.last_val["bpc"], "train_loss": st.last_train,
                # the last evaluation of the curve's sample, kept beside the split's when both exist
                "val_loss_sample": st.last_val["loss"], "val_loss_se": None, "val_windows": None, "val_chars": None,
                **split,
                "n_params": m.num_params(), "n_params_non_embedding": m.num_params(non_embedding=True),
                "extra_params": m.extra_params(), "tokens_seen": tokens,
                # what variant_lr_scale speeds up: a row without any is the same run at every factor
                "n_variant_params": sum(p.numel() for p in m.variant_parameters()),
                "tokens_per_s": tokens / st.train_s if st.train_s > 0 else 0.0}

    def describe_start(self) -> str:
        m = self.model
        return (f"{self.run.label}: {m.num_params():,} params ({m.num_params(non_embedding=True):,} "
                f"non-embedding, extra {m.extra_params():+,})")

    def describe_val(self, step: int, values: dict) -> str:
        return f"{self.run_id} step {step}: val loss {values['loss']:.4f} ({values['bpc']:.4f} bpc)"

    def describe_final(self, final: dict) -> str:
        return f"val loss {final['val_loss']:.4f} ({final['val_bpc']:.4f} bpc)"


# ============================================================================ CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID",
                        help="run of the matrix, '<row>-s<seed>' (e.g. rope-s0)")
    add_run_options(parser)


def train(params: Params, spec: RunSpec, *, fresh: bool = False, stop_after: int | None = None,
          progress: bool = True, stale: str = "error") -> int:
    """Train (or resume, or skip when finished) run `spec`; returns the exit status."""
    return train_run(CharTrack(params, spec), fresh=fresh, stop_after=stop_after, stale=stale, progress=progress)


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    return run_track(CharTrack(params, find_run(params, args.run)), args)


def main(argv: list[str] | None = None) -> int:
    """`python -m kernattn.tracks.char.track ...`: this stage alone (same options as `kernattn train`)."""
    from ...cli import main as cli_main

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())


RECIPE = CharTrack  # what the engine trains for this track (kernattn.tracks.track_recipe: the preflight)
