"""What a trained GKA row's bandwidths say beside its claim rows (issue 25): a GKA row that
starts at sigma = 1 (`init_sigma: paper`) may end near the identity (every token attending to
itself), and its verdict then says little about Gaussian kernel attention. Read here: sigma at
the end from the run's checkpoint (every `log_sigma` of its model, in layer order) and the mean
diagonal attention weight (the identity rule's reading, or where a track's analysis measured it).

"paper" for sigma = 1 is our inference, not a number of gka-paper: the paper publishes no
initial bandwidth; sigma = 1 is where its log-sigma parametrisation starts when the
log-parameter starts at zero (INIT_NOTE).

The identity rule that reads these weights (a row that stayed at the identity is "not comparable")
is report/verdicts/gka_identity.py. The weight is measured here, from each finished run's
checkpoint (`run_diagonal`): the report's declared inputs are the runs' final.json files, and
load_finished accepts only the ckpt.pt that final.json names (same fingerprint and step), so the
report reads no weights its declared inputs do not pin down; no stage writes a new, undeclared
output. The measurement reads the weights the claims judge: the EMA weights for the ViT (its
claims compare EMA top-1), the trained weights elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


INIT_NOTE = ("init_sigma \"paper\" = sigma 1 is an inference: gka-paper publishes no initial bandwidth "
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
            else "; mean diagonal weight: not measured")
    return f"{part}{diag} ({read}); {INIT_NOTE}"


# ----------------------------------------------------------------------------- the diagonal weight
# The fixed validation batch of the report's measurement: the first PROBE_ROWS windows (images) of
# the track's first validation batch. A few rows are enough for a mean over every query of every
# head and layer, and keep the N x N weights small at the paper's contexts.
PROBE_ROWS = 8
JUDGED_WEIGHTS = {"vision": "ema"}  # the checkpoint part whose weights a track's claims judge
UNREADABLE = (ValueError, OSError, KeyError, RuntimeError)  # UsageError is a ValueError


def run_diagonal(track, rows: int | None = PROBE_ROWS) -> float:
    """A finished run's mean diagonal weight at the end: the weight each query gives itself,
    averaged over GKA layers, heads, batch rows and the queries with more than one allowed key
    (attention.gka_readings.mean_diagonal_weight), on the track's probe_input. The run's track is built
    afresh and its checkpoint loaded (JUDGED_WEIGHTS); a missing or mismatched run raises the
    one-line UsageError of engine.rundir.load_finished."""
    from ..engine import resolve_device
    from ..engine.rundir import load_trained
    from ..attention.gka_readings import mean_diagonal_weight

    load_trained(track, resolve_device("auto"), JUDGED_WEIGHTS.get(track.name, "model"))
    model = track.model
    x = track.probe_input(rows)
    return float(mean_diagonal_weight(model, lambda: model(x)).mean())


@dataclass(frozen=True)
class DiagonalReading:
    """A GKA row's mean diagonal weight at the end, per run; None where it was not read (`why`)."""

    row: str
    values: dict[str, float | None]
    why: dict[str, str] = field(default_factory=dict)

    def above(self, threshold: float) -> list[str]:
        return [r for r, v in self.values.items() if v is not None and v > threshold]

    @property
    def unread(self) -> list[str]:
        return [r for r, v in self.values.items() if v is None]


def read_row(row: str, run_dirs: Mapping[str, Path], make_track: Callable[[str], object]) -> DiagonalReading:
    """Every run of a GKA row (`run_dirs`: run id -> its folder): run_diagonal on the track
    `make_track(run_id)` builds. The files are looked for first, so a run that never finished
    costs no data loading; what stops a reading is kept as its reason."""
    from ..engine import CKPT, FINAL

    values, why = {}, {}
    for run_id, folder in run_dirs.items():
        values[run_id] = None
        missing = [f for f in (FINAL, CKPT) if not (Path(folder) / f).is_file()]
        if missing:
            why[run_id] = f"no {' and no '.join(missing)} in {folder}"
            continue
        try:
            values[run_id] = run_diagonal(make_track(run_id))
        except UNREADABLE as exc:
            why[run_id] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    return DiagonalReading(row, values, why)
