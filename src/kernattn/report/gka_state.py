"""What a trained GKA row's bandwidths say beside its claim rows (issue 25): a GKA row that
starts at sigma = 1 (`init_sigma: paper`) may end near the identity (every token attending to
itself), and its verdict then says little about Gaussian kernel attention. Read here: sigma at
the end from the run's checkpoint (every `log_sigma` of its model, in layer order) and the mean
diagonal attention weight (the identity rule's reading, or where a track's analysis measured it).

"paper" for sigma = 1 is our inference, not a number of gka-paper: the paper publishes no
initial bandwidth; sigma = 1 is where its log-sigma parametrisation starts when the
log-parameter starts at zero (INIT_NOTE).

The identity rule (issue 37, paper_numbers.yaml `gka_identity`): a GKA row whose mean diagonal
attention weight at the end is above `max_diagonal` on any of its runs reads "not comparable
(sigma stayed at identity: ...)" in every claim that compares it; a run whose weight could not
be read makes the claim "not judged (diagonal weight not read: ...)". The weight is measured
here, from each finished run's checkpoint (`run_diagonal`): the report's declared inputs are the
runs' final.json files, and load_finished accepts only the ckpt.pt that final.json names (same
fingerprint and step), so the report reads no weights its declared inputs do not pin down; no
stage writes a new, undeclared output. The measurement reads the weights the claims judge: the
EMA weights for the ViT (its claims compare EMA top-1), the trained weights elsewhere.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import verdicts
from .claims import ClaimResult

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


# ----------------------------------------------------------------------------- the identity rule
def max_diagonal(papers: dict) -> float:
    """paper_numbers.yaml `gka_identity.max_diagonal`; a claims file of one's own without the
    block is read under the shipped file's rule (as build.load_paper_numbers does for the gates)."""
    rule = papers.get("gka_identity")
    if rule is None:
        import yaml
        from importlib import resources

        rule = yaml.safe_load(resources.files(__package__).joinpath("paper_numbers.yaml").read_text())["gka_identity"]
    return float(rule["max_diagonal"])


def identity_text(reading: DiagonalReading, threshold: float) -> str:
    """'gka: mean diagonal weight at the end gka-s0 0.412, gka-s1 not read (why) (identity above 0.9, ...)'."""
    runs = ", ".join(f"{r} {v:.3f}" if v is not None else f"{r} not read ({reading.why.get(r, '?')})"
                     for r, v in reading.values.items())
    return (f"{reading.row}: mean diagonal weight at the end {runs or 'of no run'} "
            f"(identity above {threshold:g}, paper_numbers.yaml gka_identity)")


def identity_verdict(verdict: str, reading: DiagonalReading | None, threshold: float) -> str:
    """The rule on a verdict of a claim that compares the row (module docstring). Any run above
    the threshold: the comparison mixes in a model that never left the identity, a fact of its
    initialisation. A run not read leaves a tested verdict standing on a guess: not judged.
    A verdict that tested nothing (not run, not judged, not comparable) is kept then."""
    if reading is None or verdict == verdicts.NOT_RUN or not reading.values:
        return verdict
    above = reading.above(threshold)
    if above:
        runs = ", ".join(f"{r} {reading.values[r]:.3f}" for r in above)
        why = (f"sigma stayed at identity: {reading.row}'s mean diagonal weight above {threshold:g} on "
               f"{len(above)} of {len(reading.values)} runs ({runs})")
        head = f"{verdicts.NOT_COMPARABLE} ("
        other = verdict[len(head):-1] if verdict.startswith(head) else ""
        return verdicts.not_comparable("; ".join(x for x in (why, other) if x))
    tested = not (verdict.startswith(verdicts.NOT_COMPARABLE) or verdicts.is_withheld(verdict))
    if reading.unread and tested:
        run = reading.unread[0]
        return verdicts.not_judged(f"diagonal weight not read: {run}: {reading.why.get(run, 'unknown')}")
    return verdict


def apply_identity(res: ClaimResult, reading: DiagonalReading | None, threshold: float) -> ClaimResult:
    """`res` under the rule, its readings beside the detail; a changed verdict is also its
    comparisons' (the pairs table must not keep a verdict the claim no longer has)."""
    if reading is None or res.verdict == verdicts.NOT_RUN:
        return res
    verdict = identity_verdict(res.verdict, reading, threshold)
    if verdict != res.verdict:
        res.verdict = verdict
        res.comparisons = [dataclasses.replace(c, verdict=verdict) for c in res.comparisons]
    res.detail = "; ".join(x for x in (res.detail, identity_text(reading, threshold)) if x)
    return res
