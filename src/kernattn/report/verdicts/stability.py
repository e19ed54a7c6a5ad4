"""gka-paper's "GKA trains stably" as a rule on every GKA run's training record (issue 25).

A run trains stably when its metrics.jsonl (the engine's record: a train line every
log_every steps holding the mean loss since the last one) has

  - no divergence line (the engine ends a diverged run with {"status": "FAILED", ...}),
  - no non-finite training loss, and
  - after the first `skip_fraction` of training (warm-up and the first fast fall, where a
    loss still far above its later minimum is expected), no train line above
    `spike_factor` x the running minimum of the lines before it.

The train lines are already means over log_every steps, so a single noisy batch does not
make a spike. Both numbers are fixed in paper_numbers.yaml (`stability:`) before the runs, and
so is what a reading needs (issue 37): at least `min_steps` optimizer steps in every run and
`min_seeds` runs of every row (a run's row: its id before '-s<seed>', as config.rows.runs_of
names runs); below that "not judged (too short: ...)", never "stable" read from a few steps.

A run's steps are those its record shows: the step of its last train line (the engine writes
one at the last step). The configured length is not used because it is not what was read: an LM
row's length comes from its compute budget, not one configured number, and a run stopped early
did not take the steps its configuration names.

A divergence or a non-finite train loss contradicts at any length and seed count: a short run
cannot show stability but can show its absence, and a run cut off by a divergence ends early,
so its last train line would call it "too short" and hide the very thing the claim denies.

The claim's verdict, in order: not run without a GKA run; not judged while a GKA run's
metrics.jsonl is missing; contradicted when a run diverged or logged a non-finite loss; not
judged (too short: ...) below either minimum; else reproduced when every GKA run of the part
is stable, contradicted when one has a spike (the run and what happened are named).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..claims import ClaimResult
from . import words


@dataclass(frozen=True)
class Rule:
    """paper_numbers.yaml `stability:`."""

    spike_factor: float    # a train line above this x the running minimum is a spike
    skip_fraction: float   # of the training steps, before which no spike is counted
    min_steps: int = 0     # a run shorter than this is too short to read
    min_seeds: int = 1     # a row with fewer runs is too short to read


def rule(papers: dict) -> Rule:
    s = papers.get("stability") or {}
    try:
        r = Rule(float(s["spike_factor"]), float(s["skip_fraction"]), int(s["min_steps"]), int(s["min_seeds"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"paper_numbers.yaml: stability needs numbers spike_factor, skip_fraction, min_steps and "
                         f"min_seeds ({exc})") from None
    if r.min_steps < 1 or r.min_seeds < 1:
        raise ValueError(f"paper_numbers.yaml: stability.min_steps and min_seeds must be at least 1; "
                         f"got {r.min_steps} and {r.min_seeds}")
    if not (r.spike_factor > 1 and 0 <= r.skip_fraction < 1):
        raise ValueError(f"paper_numbers.yaml: stability.spike_factor must exceed 1 and skip_fraction lie in [0, 1); "
                         f"got {r.spike_factor} and {r.skip_fraction}")
    return r


@dataclass(frozen=True)
class TrainRecord:
    """A run's train lines (step, mean loss) and its divergence, as metrics.jsonl holds them."""

    steps: tuple[int, ...]
    losses: tuple[float, ...]
    failure: str | None = None     # the FAILED line's error, when the run diverged
    missing: bool = False          # no readable metrics.jsonl


def read_record(path: str | Path) -> TrainRecord:
    """metrics.jsonl's train lines and FAILED line; a missing file is `missing`, a torn last
    line (a run killed mid-write) is skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return TrainRecord((), (), missing=True)
    steps, losses, failure = [], [], None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("status") == "FAILED":
            failure = str(rec.get("error", "diverged"))
        elif rec.get("split") == "train" and isinstance(rec.get("loss"), (int, float)):
            steps.append(int(rec["step"]))
            losses.append(float(rec["loss"]))
    return TrainRecord(tuple(steps), tuple(losses), failure)


def unstable_because(record: TrainRecord, r: Rule) -> str | None:
    """Why the run did not train stably (one clause), or None when it did."""
    if record.failure is not None:
        return f"diverged ({record.failure})"
    if not record.losses:
        return "no train lines"
    bad = next((s for s, x in zip(record.steps, record.losses) if not math.isfinite(x)), None)
    if bad is not None:
        return f"non-finite train loss at step {bad}"
    start = r.skip_fraction * max(record.steps)
    low = math.inf
    for step, loss in zip(record.steps, record.losses):
        if step > start and low < math.inf and loss > r.spike_factor * low:
            return f"train loss {loss:.4f} at step {step} is {loss / low:.2f}x its running minimum {low:.4f}"
        low = min(low, loss)
    return None


def worst_ratio(record: TrainRecord, r: Rule) -> float | None:
    """The largest train line over its running minimum after the skipped start (1: never above)."""
    if not record.losses or any(not math.isfinite(x) for x in record.losses):
        return None
    start, low, worst = r.skip_fraction * max(record.steps), math.inf, 1.0
    for step, loss in zip(record.steps, record.losses):
        if step > start and low < math.inf:
            worst = max(worst, loss / low)
        low = min(low, loss)
    return worst


def too_short(records: Sequence[tuple[str, TrainRecord]], r: Rule) -> str | None:
    """Why the runs are too short to read (one clause), or None: every run at least
    r.min_steps steps (its last train line), every row (run id '<row>-s<seed>') r.min_seeds runs."""
    short = [(rid, max(rec.steps, default=0)) for rid, rec in records if max(rec.steps, default=0) < r.min_steps]
    if short:
        rid, steps = short[0]
        return (f"too short: {rid} trained {steps} step{'s' if steps != 1 else ''}, {r.min_steps} needed"
                + (f" (and {len(short) - 1} more run{'s' if len(short) > 2 else ''})" if len(short) > 1 else ""))
    rows: dict[str, int] = {}
    for rid, _ in records:
        row = rid.rsplit("-s", 1)[0]
        rows[row] = rows.get(row, 0) + 1
    few = next(((row, n) for row, n in rows.items() if n < r.min_seeds), None)
    return None if few is None else f"too short: {few[1]} seed{'s' if few[1] != 1 else ''} of {few[0]}, {r.min_seeds} needed"


def judge(claim: dict, records: Sequence[tuple[str, TrainRecord]], r: Rule, scale: str) -> ClaimResult:
    """The claim over every GKA run (run id, record) of a part (module docstring)."""
    if not records:
        return ClaimResult(claim, words.NOT_RUN, scale=scale, ours="—", detail="no GKA runs at this scale")
    missing = [rid for rid, rec in records if rec.missing]
    if missing:
        return ClaimResult(claim, words.not_judged(f"no metrics.jsonl for {', '.join(missing)}"), scale=scale,
                           ours="—", detail="the training record of every GKA run is needed")
    why = {rid: unstable_because(rec, r) for rid, rec in records}
    # a divergence or a non-finite loss is instability at any length; anything else needs a long run
    broke = any(w is not None and w.startswith(("diverged", "non-finite")) for w in why.values())
    short = None if broke else too_short(records, r)
    if short is not None:
        return ClaimResult(claim, words.not_judged(short), scale=scale, ours=f"{len(records)} GKA runs",
                           detail=f"a reading needs {r.min_steps} steps per run and {r.min_seeds} seeds per row "
                                  f"(paper_numbers.yaml stability:)")
    ratios = [x for _, rec in records if (x := worst_ratio(rec, r)) is not None]
    bad = [f"{rid}: {w}" for rid, w in why.items() if w is not None]
    rule_text = (f"rule: no divergence, no non-finite train loss, no train line above {r.spike_factor:g}x its "
                 f"running minimum after the first {r.skip_fraction:.0%} of training")
    ours = f"{len(records) - len(bad)} of {len(records)} GKA runs stable"
    if ratios:
        ours += f"; largest train line / running minimum {max(ratios):.3f}"
    return ClaimResult(claim, words.CONTRADICTED if bad else words.REPRODUCED, scale=scale, ours=ours,
                       estimate=max(ratios) if ratios else None, detail="; ".join([rule_text, *bad]))
