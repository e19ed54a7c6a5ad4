"""The toy track's recipe (kernattn train-toy): the engine trains it like every track."""

from __future__ import annotations

import argparse
import dataclasses

import torch
import torch.nn.functional as F

from ...config import RunSpec, fingerprinted, params_from_args
from ...engine.options import add_run_options, run_track
from ...engine import ONE_PROCESS, Layout, Track
from .data import load_stream
from .model import Toy
from .stages import find_toy_run, run_dir


class ToyTrack(Track):
    command, name, section_name = "train-toy", "toy", "toy"

    def __init__(self, params, run: str | RunSpec):
        tp = self.section = params.toy
        self.params = params
        self.run = run if isinstance(run, RunSpec) else find_toy_run(params, run)
        self.run_id, self.seed, self.variant = self.run.run_id, self.run.seed, self.run.variant
        self.run_dir = run_dir(params, self.run_id)
        stream = torch.from_numpy(load_stream(tp.data_dir))
        cut = len(stream) * 3 // 4
        self.train_stream, self.val_stream = stream[:cut], stream[cut:]
        self.max_steps, self.items_per_step = tp.max_steps, tp.batch_size * tp.context
        self.eval_every, self.checkpoint_every = tp.eval_every, tp.checkpoint_every
        self.global_batch = tp.batch_size  # split over ranks and micro-batches by the engine

    def fingerprint_config(self) -> dict:
        return {"toy": fingerprinted(self.section), "run": dataclasses.asdict(self.run)}

    def build(self, device: torch.device, layout: Layout = ONE_PROCESS) -> None:
        tp = self.section
        self.device, self.layout = device, layout
        self.model = Toy(tp.vocab, tp.d_model, tp.n_head, self.variant, self.run.options).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=tp.lr)

    def set_lr(self, step: int) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = self.section.lr
        return self.section.lr

    def _windows(self, stream: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        return torch.stack([stream[s: s + self.section.context] for s in starts.tolist()]).to(self.device)

    def batch(self, step: int, micro: int) -> torch.Tensor:
        """This rank's micro-batch of the step's windows, drawn whole on every rank from the step."""
        tp = self.section
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        starts = torch.randint(0, len(self.train_stream) - tp.context, (tp.batch_size,), generator=gen)
        return self._windows(self.train_stream, self.share(starts, micro))

    def loss(self, fwd, batch: torch.Tensor) -> torch.Tensor:
        lag = self.section.lag
        logits = fwd(batch).float()
        return F.cross_entropy(logits[:, lag:].reshape(-1, logits.shape[-1]), batch[:, :-lag].reshape(-1))

    def probe_input(self, rows: int | None = None) -> torch.Tensor:
        return self._val()[:rows]

    def _val(self) -> torch.Tensor:
        starts = torch.arange(0, len(self.val_stream) - self.section.context, self.section.context)
        return self._windows(self.val_stream, starts)

    @torch.no_grad()
    def evaluate(self, fwd, autocast) -> dict:
        return {"loss": float(self.loss(fwd, self._val()))}

    def config(self) -> dict:
        return {**self.identity(), "toy": dataclasses.asdict(self.section)}

    def final(self, state) -> dict:
        return {"val_loss": state.last_val["loss"], "n_params": sum(p.numel() for p in self.model.parameters())}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="'<row>-s<seed>' of toy.rows")
    add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    return run_track(ToyTrack(params_from_args(args), args.run), args)


RECIPE = ToyTrack  # what the engine trains for this track (the preflight builds it)
