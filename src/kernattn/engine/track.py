"""The protocol a track implements; the engine (loop.py) does everything else.

A track is built from the params and one run id; it loads its data in __init__ (the data's
digest is part of the fingerprint), then supplies:

  identity()            run_id, seed, variant and the track's own fields (row, label, ...):
                        the head of final.json, and the MLflow tags
  fingerprint_config()  what a checkpoint must share with this command to be resumed
  build(device, layout) model, optimizer (and any other part) on `device`; keeps `layout`
                        (self.layout: the batch layout the engine derived, below)
  parts()               the named state parts of a checkpoint: {"model": m, "optimizer": o, ...}
  generators()          the track's own RNGs (batch order), saved with the global ones
  set_lr(step)          the learning rate of optimizer step `step` (0-based), applied; returned.
                        A function of the step alone: the engine's schedule (schedule.py)
                        calls it, records the rate and may call it again for earlier steps
  batch(step, micro)    micro-batch `micro` of step `step` (the data position is the step and
                        the generators' state, both in the checkpoint); under data parallelism
                        the rank's share of the step's global batch (share(), dist.py)
  loss(fwd, batch)      a float32 scalar
  after_step(step)      after the optimizer (an EMA update)
  evaluate(fwd)         {"loss": ..., ...} on the fixed validation set, each rank scoring its
                        val_share() and the sums reduced (reduce_sum) before any division
  line_fields(split, step, values)  a metrics line's track fields (values: {"loss"} on a
                        train line, evaluate()'s on a val line); the engine writes step,
                        split, lr, elapsed_s and the rate around them
  config()              the track's sections of config.json
  final(state)          the track's results in final.json; finish(run_dir) writes any other
                        output before final.json (which the engine writes last)

and sets, as class attributes, `command`, `name` and `section_name` (no defaults: a subclass
without them fails at its definition), and in __init__ `section`, its params section: a
config.RunSettings (TrainParams, LMParams, VisionParams), whose device, dtype, compile,
threads and grad_clip the engine reads, and whose `lr` the divergence hint names.

Data parallelism: a track sets `global_batch` (items a step over every rank) and, if it has
one, `micro_default` (its micro-batch when the section's micro_batch is null). The engine
derives the layout from them (dist.Layout: the world, micro_batch and grad_accum, global =
micro x accum x world size) and passes it to build(), which keeps it; the track reads it
(`world`, `micro_batch`, `grad_accum`). A track built outside the engine (an analysis loading
a finished run) gets the default, one process. A track without `global_batch` trains in one
process only, one micro-batch a step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from ..config.common import RunSettings
from . import dist
from .mlrun import NamesExperiment

ONE_PROCESS = dist.Layout()  # a track's layout outside the engine: one process, one micro-batch a step

# Class attributes every track sets itself: a default here would let a new track pass as the
# char track in its messages, config.json and MLflow tags.
REQUIRED = ("command", "name", "section_name")


class Track:
    command: ClassVar[str]       # the CLI command (messages: "kernattn <command>: ...")
    name: ClassVar[str]          # the track's name: config.json, MLflow tag and experiment rule
    section_name: ClassVar[str]  # the params section holding lr, grad_clip, device, ... (error hints)
    rate_unit = "tokens"   # train lines carry '<rate_unit>_per_s'
    fingerprint_format = 1  # bump when the same params would train other weights

    # set by the track's __init__
    params: Any
    section: RunSettings  # TrainParams, LMParams, VisionParams: the runtime fields and lr
    # The section whose `experiment` names the MLflow experiment (tracking, lm); None:
    # kernattn-<name>-<scale>.
    experiment_section: NamesExperiment | None = None
    run_id: str
    seed: int
    variant: str
    run_dir: Path
    max_steps: int
    items_per_step: int
    log_every: int = 1
    eval_every: int = 1
    checkpoint_every: int = 1
    # steps at which the loop also keeps a copy of its checkpoint (keep-<step>.pt in the run
    # folder): where a shorter run branches off this one (the char track's wsd budgets)
    keep_at: tuple[int, ...] = ()
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    global_batch: int | None = None   # items a step over every rank (None: one process only)
    micro_default: int | None = None  # per-rank micro-batch when section.micro_batch is null
    layout: dist.Layout = ONE_PROCESS  # build()'s: the engine's (loop.batch_layout), read here

    @property
    def world(self) -> dist.World:
        return self.layout.world

    @property
    def micro_batch(self) -> int | None:
        return self.layout.micro_batch

    @property
    def grad_accum(self) -> int:
        return self.layout.grad_accum

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__mro__[: cls.__mro__.index(Track)]  # the subclass and its bases below Track
        missing = [attr for attr in REQUIRED if not any(attr in vars(klass) for klass in own)]
        if missing:
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}: a Track subclass must set the class attributes "
                            f"{', '.join(missing)} (e.g. command, name, section_name = 'train-lm', 'lm', 'lm')")

    def identity(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seed": self.seed, "variant": self.variant}

    # What the preflight reads of a track (kernattn.preflight.slices): a track whose layers
    # repeat may be stepped as slices of itself on a machine too small for its whole step.
    @classmethod
    def repeating_layers(cls, params) -> tuple[str, int, int, int] | None:
        """(params section, depth, period, width) when the row's model is a stack of layers whose
        kinds repeat every `period` layers, built from that section's `depth` and `aspect_ratio`
        (width = aspect_ratio x depth, as nanochat's): a slice is the same section with fewer
        layers at the same width. None (the default): it steps whole."""
        return None

    def planned_parameters(self) -> int | None:
        """The full model's parameter count as the track plans it without building it (what a
        sliced step's extrapolation must give); None where the track does not plan it."""
        return None

    def fingerprint_config(self) -> dict[str, Any]:
        raise NotImplementedError

    def build(self, device: torch.device, layout: dist.Layout = ONE_PROCESS) -> None:
        raise NotImplementedError

    def parts(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer}

    def generators(self) -> dict[str, torch.Generator]:
        return {}

    def set_lr(self, step: int) -> float:
        raise NotImplementedError

    def batch(self, step: int, micro: int) -> Any:
        raise NotImplementedError

    def share(self, items, micro: int):
        """This rank's micro-batch `micro` of a step's global batch `items` (drawn whole on every rank)."""
        return dist.shard(items, micro, self.world, self.grad_accum)

    def val_share(self, items):
        return dist.val_share(items, self.world)

    def reduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        return dist.reduce_sum(values, self.world)

    def loss(self, fwd, batch: Any) -> torch.Tensor:
        raise NotImplementedError

    def after_step(self, step: int) -> None:
        pass

    def evaluate(self, fwd, autocast) -> dict[str, float]:
        raise NotImplementedError

    def line_fields(self, split: str, step: int, values: dict[str, float]) -> dict[str, Any]:
        return dict(values)

    def config(self) -> dict[str, Any]:
        return {}

    def seed_run_dir(self, fingerprint: str, fp_config: dict[str, Any]) -> bool:
        """Called on rank 0 for a run folder with nothing to resume: write a checkpoint (with
        this `fingerprint` and `fp_config`) and the metrics lines it counts into it, to start
        from another run's state (a branch); True when it did. Default: start from scratch."""
        return False

    def probe_input(self, rows: int | None = None) -> torch.Tensor:
        """The model input of the first batch of the fixed validation set (its first `rows`
        rows), on the built model's device: what a reading of the trained model (GKA's
        diagonal weight: report.gka_state, the GKA-init study) is measured on."""
        raise NotImplementedError

    def final_evaluate(self, fwd, autocast) -> dict[str, Any]:
        """Run on every rank after the last step (a collective may be used); its values reach
        final() as state.final_values. Default: nothing beyond the last evaluation."""
        return {}

    def final(self, state) -> dict[str, Any]:
        return {}

    def final_tags(self, final: dict[str, Any]) -> dict[str, str]:
        return {"val_loss": f"{final['val_loss']:.6f}"} if final.get("val_loss") is not None else {}

    def finish(self, run_dir: Path) -> None:
        pass

    def describe_start(self) -> str:
        n = sum(p.numel() for p in self.model.parameters())
        return f"{n:,} params, {self.max_steps} steps"

    def describe_val(self, step: int, values: dict[str, float]) -> str:
        return f"{self.run_id} step {step}: val loss {values['loss']:.4f}"

    def describe_final(self, final: dict[str, Any]) -> str:
        return f"val loss {final['val_loss']:.4f}"

    def divergence_fix(self) -> str:
        s = self.section_name
        return f"lower {s}.lr (now {self.section.lr:g}) or set {s}.grad_clip"
