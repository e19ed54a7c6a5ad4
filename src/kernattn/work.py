"""What one planned job computes, in FLOPs, and the run of a stage `kernattn plan` counts.

A unit declares its planned stages itself (`PLANNED` in <unit>.stages: stage name -> the
stage's runs as PlannedRun, each with the function that counts its work, kept in the unit's
own cost.py); kernattn.dag.plan loops over the units and names none of them. This module is a
floor below the units: it imports no track, study or dag module, and torch only inside the
counters (the DAG parse must not pay for it).

FLOPs are counted the way the benchmark counts them: the unit's own model built on the meta
device (no memory, no compute) and one sample passed through it under
torch.utils.flop_counter.FlopCounterMode, forward + backward for training, forward for
evaluation. FlopCounterMode counts the matmul-shaped ops (linear, bmm, sdpa, conv):
elementwise work and the optimiser step are left out, as in MFU's usual convention.

A training job's FLOPs = steps x samples per step x (fwd + bwd of one sample) + every
evaluation's forward samples (the engine evaluates at step 0, every eval_every steps and at
the end).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .config import Params, RunSpec


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


Counter = Callable[[Params, RunSpec], Work]


@dataclass(frozen=True)
class PlannedRun:
    """One run of a planned stage, as its unit declares it."""
    track: str                  # whose model it trains: its MFU in the plan
    spec: RunSpec
    count: Counter              # its work (the unit's cost.py)
    study: str = ""             # the study it belongs to ("" for the main DAG)
    budget: int | None = None   # a cooldown branch's budget: its work differs from its row's other branches'
    paper: str = ""             # what it is for in the plan's `paper` column: its row's tables (row_tables), a study's claim
    loader_workers: int = 0     # CPU workers per GPU decoding its inputs where they may bound it (0: never)

    def work(self, p: Params) -> Work:
        return self.count(p, self.spec)


def row_tables(rows, row: str) -> str:
    """The tables and figures of the documents that `row` (one of `rows`, a track's rows) trains
    a model of, its `paper:` references, e.g. "gka-paper Table 5"; "; " between several; "" for a
    row of no document's."""
    refs = next((r.paper for r in rows if r.name == row), ())
    return "; ".join(dict.fromkeys(
        f"{ref.key} " + (f"Table {ref.table}" if ref.table is not None else f"Figure {ref.figure}") for ref in refs))


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


def token_sample(vocab: int, context: int) -> Callable:
    """One (input, target) pair of `context` tokens, for a language model's count."""
    import torch
    return lambda: (torch.randint(0, vocab, (1, context)), torch.randint(0, vocab, (1, context)))


def token_loss(model, xy):
    """Next-token cross-entropy of a model that returns logits."""
    import torch.nn.functional as F
    logits = model(xy[0])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xy[1].reshape(-1))
