"""The learning-rate schedule as an engine component: at each optimizer step the engine asks
the track for that step's rate (Track.set_lr, which applies it to the track's optimizer: its
groups' scales, the LM's Muon momentum and weight decay) and records it. The record is part of
the checkpoint (cut back with it on resume) and is written beside final.json as `lr.npy`: the
rate of every optimizer step 0 .. max_steps - 1, float64, as set (before any per-group scale).

So every reader of a run's schedule reads one file (report.verdicts.gates: the learning-rate sum behind
each evaluation, Adam's travel limit over a tail), whatever the track and however its schedule
is computed, instead of rebuilding it from params or interpolating the rates a run logged.
Under data parallelism every rank sets the same rates; rank 0 writes the file.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from ..io import atomic_write_bytes

FILE = "lr.npy"


class LrSchedule:
    def __init__(self, track):
        self.track = track
        self.rates: list[float] = []

    def step(self, step: int) -> float:
        """Set and record the rate of optimizer step `step` (0-based)."""
        lr = float(self.track.set_lr(step))
        del self.rates[step:]
        self.rates.append(lr)
        return lr

    def last(self, step: int) -> float:
        """The rate the weights at `step` were last trained at (what a val line reports): step
        - 1's; at step 0 the rate the first step will take, set now (that step sets it again,
        and set_lr is a function of the step alone)."""
        return self.rates[step - 1] if step > 0 else self.step(0)

    def state_dict(self) -> dict:
        return {"rates": torch.tensor(self.rates, dtype=torch.float64)}

    def load_state_dict(self, state: dict | None, step: int) -> None:
        """The checkpoint's record up to `step`. A checkpoint from before the record has none:
        the rates of its steps are set again (set_lr is a function of the step alone, and the
        step about to run sets its own rate after these)."""
        if state is None:
            self.rates = [float(self.track.set_lr(s)) for s in range(step)]
        else:
            self.rates = [float(x) for x in state["rates"][:step]]

    def write(self, run_dir: Path) -> None:
        buf = io.BytesIO()
        np.save(buf, np.asarray(self.rates, dtype=np.float64))
        atomic_write_bytes(Path(run_dir) / FILE, buf.getvalue())


def read(run_dir: Path) -> np.ndarray | None:
    """The rate of every optimizer step of a finished run, or None (no lr.npy: a run trained
    before the engine recorded it)."""
    path = Path(run_dir) / FILE
    return np.load(path) if path.is_file() else None
