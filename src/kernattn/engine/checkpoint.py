"""The training loop's checkpoints: what one holds, writing it, and reading one back.

A checkpoint (rundir.py: the format and the keys every one carries) holds the loop's counters
(LoopState), every rank's RNG states, the variants' parameter trace, the learning-rate
schedule, the session's bookkeeping (metrics.jsonl's line count, the MLflow run) and the
track's parts. Checkpoints writes and restores them for one run; loop.py decides when to
write one and refuses to replace the last good one by broken weights (all_finite); the kept
copies (keep-<step>.pt, Track.keep_at) are whole copies of the checkpoint at a step.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import torch

from ..errors import UsageError
from ..io import atomic_path, atomic_torch_save
from . import dist
from .rundir import CKPT, CKPT_FORMAT
from .runtime import derive_seed, rng_state, seed_everything, set_rng_state
from .schedule import LrSchedule
from .trace import ParamTrace
from .track import Track


@dataclasses.dataclass
class LoopState:
    """What the loop carries between steps and across sessions (the checkpoint's 'loop' part
    and its counters)."""
    acc: torch.Tensor  # training loss summed on the device since the last train line
    acc_n: int = 0
    step: int = 0
    elapsed_s: float = 0.0  # wall seconds of training and evaluation, over sessions
    train_s: float = 0.0    # of pure training (the rates' denominator)
    last_train: float | None = None
    last_val: dict[str, float] | None = None
    ckpt_step: int | None = None
    final_values: dict | None = None   # Track.final_evaluate's, after the last step (not checkpointed)


def keep_name(step: int) -> str:
    """The kept copy of the checkpoint at `step` (Track.keep_at)."""
    return f"keep-{step}.pt"


def keep_copy(src: Path, dest: Path) -> None:
    """Copy a checkpoint whole or not at all (a reader never sees half a file)."""
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)


def all_finite(model: torch.nn.Module) -> bool:
    """Every parameter finite (one sync): checked before a checkpoint replaces the last one."""
    flags = [torch.isfinite(p).all() for p in model.parameters()]
    return bool(torch.stack(flags).all().item()) if flags else True


def checkpoint_state(st: LoopState, *, fingerprint: str, fp_config: dict, metrics_lines: int,
                     mlflow_run_id: str | None, rngs: list, world_size: int, trace: ParamTrace, schedule: LrSchedule,
                     track: Track) -> dict[str, Any]:
    """The checkpoint of the loop at st.step: its bookkeeping, counters, every rank's RNG
    states (`rngs`, rank 0's first), the trace, the schedule and the track's parts."""
    state = {"format": CKPT_FORMAT, "fingerprint": fingerprint, "fingerprint_config": fp_config,
             "step": st.step, "metrics_lines": metrics_lines, "elapsed_s": st.elapsed_s,
             "train_s": st.train_s, "mlflow_run_id": mlflow_run_id,
             "loop": {"acc": st.acc.detach().cpu(), "acc_n": st.acc_n, "last_train": st.last_train,
                      "last_val": st.last_val},
             "rng": rngs[0], "world_size": world_size}
    if world_size > 1:
        state["rng_ranks"] = rngs
    if trace:
        state["param_trace"] = trace.state_dict()
    state["lr_schedule"] = schedule.state_dict()
    state |= {name: part.state_dict() for name, part in track.parts().items()}
    return state


def restore_parts(track: Track, ckpt: dict[str, Any]) -> None:
    """Load the track's parts (model, optimizer, its own) from the checkpoint."""
    missing = [name for name in track.parts() if name not in ckpt]
    if missing:  # open_run_dir checked the engine's keys; the track's parts are known only now
        raise UsageError(f"{track.run_dir / CKPT}: not a {track.name} checkpoint (no {', '.join(missing)}); "
                         f"rerun with --fresh to train {track.run_id} from scratch")
    for name, part in track.parts().items():
        part.load_state_dict(ckpt[name])


def restore_rng(track: Track, world: dist.World, ckpt: dict[str, Any]) -> None:
    """This rank's RNG states; on another number of ranks, the shared generators (the data
    position) and a fresh per-rank stream for the global ones."""
    ranks = ckpt.get("rng_ranks") or [ckpt["rng"]]
    same = len(ranks) == world.size
    set_rng_state(ranks[world.rank] if same else ranks[0], track.generators())
    if not same:
        if world.rank:
            seed_everything(derive_seed(track.seed, f"rank{world.rank}:step{int(ckpt['step'])}"))
        if world.main:
            print(f"kernattn {track.command}: {track.run_id}: the checkpoint was written by "
                  f"{len(ranks)} rank{'s' if len(ranks) > 1 else ''}, resuming on {world.size}: the same "
                  f"global batch and data position, another split", flush=True)


def restore_counters(st: LoopState, ckpt: dict[str, Any], device: torch.device) -> None:
    """The loop's counters and running loss as the checkpoint left them."""
    loop = ckpt["loop"]
    st.acc, st.acc_n = loop["acc"].to(device), int(loop["acc_n"])
    st.last_train, st.last_val = loop["last_train"], loop["last_val"]
    st.step, st.ckpt_step = int(ckpt["step"]), int(ckpt["step"])
    st.elapsed_s, st.train_s = float(ckpt["elapsed_s"]), float(ckpt["train_s"])


class Checkpoints:
    """ckpt.pt of one run: written with what the loop, the session and the track hold at a
    step, and read back into them on resume."""

    def __init__(self, track: Track, world: dist.World, fingerprint: str, fp_config: dict):
        self.track, self.world, self.fingerprint, self.fp_config = track, world, fingerprint, fp_config
        self.path = track.run_dir / CKPT

    def restore(self, ckpt: dict[str, Any], st: LoopState, trace: ParamTrace, schedule: LrSchedule,
                device: torch.device) -> None:
        """The track's parts, this rank's RNG states, the counters, the trace and the schedule."""
        restore_parts(self.track, ckpt)
        restore_rng(self.track, self.world, ckpt)
        restore_counters(st, ckpt, device)
        trace.load_state_dict(ckpt.get("param_trace"))
        schedule.load_state_dict(ckpt.get("lr_schedule"), st.step)

    def save(self, st: LoopState, trace: ParamTrace, schedule: LrSchedule, session) -> None:
        """Called on every rank (the RNG states are gathered); rank 0 writes. `session`: its
        metrics log (fsynced first: the lines the checkpoint counts are on disk before it is)
        and its MLflow run."""
        rngs = dist.gather(rng_state(self.track.generators()), self.world)
        st.ckpt_step = st.step
        if not self.world.main:
            return
        session.log.fsync()
        state = checkpoint_state(st, fingerprint=self.fingerprint, fp_config=self.fp_config,
                                 metrics_lines=session.log.lines, mlflow_run_id=session.mlflow_run_id, rngs=rngs,
                                 world_size=self.world.size, trace=trace, schedule=schedule, track=self.track)
        atomic_torch_save(self.path, state)
        session.tracker.flush()

    def keep(self, step: int) -> None:
        """A copy of the checkpoint just written at `step` (Track.keep_at), on rank 0."""
        if self.world.main:
            keep_copy(self.path, self.track.run_dir / keep_name(step))


def opening_of(ckpt: dict[str, Any] | None) -> dict[str, Any]:
    """What a session reopens from a checkpoint (session.Opening's fields): none from scratch."""
    if ckpt is None:
        return {}
    return {"resumed_at": int(ckpt["step"]), "metrics_lines": int(ckpt["metrics_lines"]),
            "mlflow_run_id": ckpt.get("mlflow_run_id")}


__all__ = ["LoopState", "Checkpoints", "opening_of", "keep_name", "keep_copy", "all_finite", "checkpoint_state",
           "restore_parts", "restore_rng", "restore_counters"]
