"""What a trained GKA row's bandwidths say beside its claim rows (issue 25): a GKA row that
starts at sigma = 1 (`init_sigma: paper`) may end near the identity (every token attending to
itself), and its verdict then says little about Gaussian kernel attention. Read here: sigma at
the end from the run's checkpoint (every `log_sigma` of its model, in layer order) and, where
a track's analysis measured it, the mean diagonal attention weight.

"paper" for sigma = 1 is our inference, not a number of seed 003: the paper publishes no
initial bandwidth; sigma = 1 is where its log-sigma parametrisation starts when the
log-parameter starts at zero (INIT_NOTE).
"""

from __future__ import annotations

import math
from pathlib import Path

INIT_NOTE = ("init_sigma \"paper\" = sigma 1 is an inference: seed 003 publishes no initial bandwidth "
             "(sigma = 1 is log sigma = 0)")


def starts_at_one(variant: str, options: dict) -> bool:
    """A GKA row whose bandwidths start at sigma = 1."""
    init = options.get("init_sigma")
    return variant == "gka" and (init == "paper" or (isinstance(init, (int, float)) and float(init) == 1.0))


def checkpoint_sigma(path: str | Path) -> list[float] | None:
    """Every head's sigma at the end (exp of the model's log_sigma tensors, in state-dict
    order), from a checkpoint; None when the file or the parameter is absent."""
    from ..io import load_torch

    path = Path(path)
    if not path.is_file():
        return None
    try:
        state = load_torch(path)
    except Exception:  # noqa: BLE001  (an unreadable checkpoint is "not read", said by the caller)
        return None
    model = state.get("model", state) if isinstance(state, dict) else {}
    out = [math.exp(float(v)) for k, t in model.items() if k.endswith("log_sigma")
           for v in t.detach().float().reshape(-1).tolist()]
    return out or None


def sigma_text(sigma: list[float] | None, mean_diagonal: float | None, read: str) -> str:
    """One line: sigma at the end (range and mean over heads), the mean diagonal weight where
    measured, and what was read."""
    if sigma is None:
        part = "sigma at the end: not read (no checkpoint)"
    else:
        part = (f"sigma at the end {min(sigma):.3g}–{max(sigma):.3g} (mean {sum(sigma) / len(sigma):.3g}, "
                f"{len(sigma)} heads)")
    diag = (f"; mean diagonal weight {mean_diagonal:.3f}" if mean_diagonal is not None
            else "; mean diagonal weight: not measured by this track's outputs")
    return f"{part}{diag} ({read}); {INIT_NOTE}"
