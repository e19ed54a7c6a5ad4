"""The attention variants' own parameters at every evaluation of a run (GPA banks, GKA's log
sigma, T5 / lag tables, learned RoPE frequencies: attention.owned_parameters), so that a claim
reading a trained bank or bandwidth can ask whether it had stopped moving (issue 25, gate (a):
report.verdicts.gates.params_settled) instead of reading it mid-flight.

The trace is part of the checkpoint (cut back with it on resume, as metrics.jsonl is) and is
written beside final.json as `param_trace.npz`: `steps` [k], `values` [k, n] float64 (the
parameters flattened in `names` order, each as stored: log sigma, log length and log tau of a
bank, GKA's log sigma are logarithms, so a change there is a relative change), `names` [p] and
`sizes` [p] (how many of the n values each parameter holds). A run without such parameters
(softmax with static RoPE, DeiT) writes none. Under data parallelism every rank holds the same
parameters; rank 0 writes the file.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from ..io import atomic_write_bytes

FILE = "param_trace.npz"


class ParamTrace:
    def __init__(self, model: torch.nn.Module):
        from ..attention import owned_parameters

        self.params = owned_parameters(model)
        self.steps: list[int] = []
        self.values: list[torch.Tensor] = []

    def __bool__(self) -> bool:
        return bool(self.params)

    def record(self, step: int) -> None:
        """The parameters as they are at `step` (an evaluation), replacing a record of the same step."""
        if not self.params:
            return
        flat = torch.cat([p.detach().double().flatten().cpu() for p in self.params.values()])
        if self.steps and self.steps[-1] == step:
            self.steps.pop(), self.values.pop()
        self.steps.append(step)
        self.values.append(flat)

    def state_dict(self) -> dict:
        return {"steps": list(self.steps), "values": torch.stack(self.values) if self.values else None}

    def load_state_dict(self, state: dict | None) -> None:
        """A checkpoint's trace (None: a checkpoint from before traces: it starts at the resume)."""
        if not state or state.get("values") is None:
            self.steps, self.values = [], []
            return
        self.steps = [int(s) for s in state["steps"]]
        self.values = list(state["values"].unbind(0))

    def write(self, run_dir: Path) -> None:
        if not self.params or not self.steps:
            return
        buf = io.BytesIO()
        np.savez(buf, steps=np.asarray(self.steps, dtype=np.int64), values=torch.stack(self.values).numpy(),
                 names=np.asarray(list(self.params)), sizes=np.asarray([p.numel() for p in self.params.values()]))
        atomic_write_bytes(Path(run_dir) / FILE, buf.getvalue())


def read(run_dir: Path) -> dict | None:
    """A run's trace: {"steps": [k], "values": [k, n], "names": [...], "sizes": [...]}, or None."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return None
    with np.load(path) as z:
        return {"steps": z["steps"], "values": z["values"], "names": [str(n) for n in z["names"]],
                "sizes": [int(s) for s in z["sizes"]]}
