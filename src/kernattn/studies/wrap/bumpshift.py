"""Does the first-layer bump follow the line width? The verdict of the line-wrap study (issue 17).

The same GPA rows are trained, with the same seeds, on the original corpus and on its
counterfactuals (kernattn.studies.wrap.text). Per run, the first-layer bump is read the way the
report reads it: the median over the first layer's heads of each bank's bump lag
(kernattn.tracks.char.analysis.banks.find_bump; heads without a bump are left out; no bump in any head:
None). Per corpus, the bump over seeds is the mean with its Student t interval.

Each corpus also has its newline peak: the main peak above lag 1 of its newline-separation
histogram, = the line width + 1 for a hard-wrapped text. A corpus without line structure
(the unwrapped one: a flat histogram of paragraph lengths) has no sharp peak
(kernattn.tracks.char.analysis.newlines.peak_contrast below SHARP_CONTRAST) and its peak is None here.

The two readings predict different moves of the bump between the reference corpus o (the
original) and a counterfactual c:
    line width:      bump_c - bump_o = peak_c - peak_o        ("the bump tracks the line width")
    paragraph scale: bump_c - bump_o = 0                      ("the bump stays at paragraph scale")
Rule, per counterfactual c, on the interval [lo, hi] of the seed-paired shift bump_c - bump_o
(Student t over the seeds both corpora have), each end widened by `tol` lags (the bump of a
bank is read on integer lags and moves by a lag or two between heads):
- it holds the line prediction and not 0: tracks; it holds 0 and not the line prediction:
  stays; otherwise (both: too wide to tell; neither: the bump moved elsewhere) inconclusive.
- c does not vote when its line structure says nothing: no sharp newline peak (unwrapped),
  or a peak within `tol` of the reference's (the line width did not move).
- fewer than two seeds with a bump in both corpora: inconclusive (no interval).
Overall: every voting corpus tracks -> tracks; every one stays -> stays; otherwise (or no
voting corpus) inconclusive.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ...report.verdicts.levels import LEVEL, POWER   # the report's level and power (the MDE's), not copies
from ...tracks.char.analysis import banks

TRACKS = "the bump tracks the line width"
STAYS = "the bump stays at paragraph scale"
INCONCLUSIVE = "inconclusive"
DEFAULT_TOL = 2.0


def run_bump(first_layer, min_lag: int) -> float | None:
    """The first-layer bump of one run: median over heads of the bump lags of G [heads, lags]."""
    lags = [b.lag for b in (banks.find_bump(g, min_lag) for g in np.asarray(first_layer)) if b is not None]
    return float(statistics.median(lags)) if lags else None


@dataclass(frozen=True)
class Interval:
    n: int
    mean: float
    lo: float | None  # None with one value, or with no spread (never a zero-width interval)
    hi: float | None
    se: float | None = None

    def mde(self, tol: float, level: float = LEVEL, power: float = POWER) -> float | None:
        """The smallest true shift this interval (widened by `tol` as the rule widens it) tells
        from 0 with probability `power`: tol + (t_{(1+level)/2} + t_power) x se, df = n - 1."""
        if self.se is None:
            return None
        df = self.n - 1
        return tol + (float(stats.t.ppf((1 + level) / 2, df)) + float(stats.t.ppf(power, df))) * self.se


# A bump is read on integer lags (run_bump: the median over heads, so halves too): each reading
# carries a rounding error of up to half a lag, uniform, sd 1/sqrt(12); a shift between two
# readings sqrt(2/12). A shift interval uses at least that sd: seeds that agree exactly still
# leave the rounding unknown, and an interval is never of zero width (never p = 0).
SHIFT_SD_FLOOR = math.sqrt(2 / 12)


def t_interval(values, level: float = LEVEL, sd_floor: float = 0.0) -> Interval | None:
    """Mean and Student t interval of `values` (None when empty), their sd taken as at least
    `sd_floor`. With one value, or values all equal and no floor (a spread of 0: the variance
    is not estimable), no interval."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    n, mean = len(vals), float(np.mean(vals))
    sd = max(float(np.std(vals, ddof=1)) if n > 1 else 0.0, sd_floor)
    if n < 2 or sd == 0:
        return Interval(n, mean, None, None)
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * se
    return Interval(n, mean, mean - half, mean + half, se)


@dataclass
class CorpusBumps:
    """One corpus of the study: its newline peak (None: no line structure) and per seed the
    run's first-layer bump (None: no bump)."""

    name: str
    newline_peak: int | None
    bumps: dict[int, float | None] = field(default_factory=dict)

    def interval(self, level: float = LEVEL) -> Interval | None:
        return t_interval([b for b in self.bumps.values() if b is not None], level)


def record_shift(out: dict, ref: CorpusBumps, other: CorpusBumps, tol: float, level: float = LEVEL) -> Interval | None:
    """The seed-paired shift of the bump, other - ref, over the seeds with a bump in both (sd at
    least SHIFT_SD_FLOOR), recorded in out["shift"] with its minimum detectable shift; None,
    and out["reason"], below two such seeds."""
    seeds = sorted(s for s in ref.bumps.keys() & other.bumps.keys()
                   if ref.bumps[s] is not None and other.bumps[s] is not None)
    shift = t_interval([other.bumps[s] - ref.bumps[s] for s in seeds], level, SHIFT_SD_FLOOR)
    if shift is None or shift.lo is None:
        out["reason"] = f"{len(seeds)} seed(s) with a bump in both corpora: no interval"
        return None
    out["shift"] = {"n": shift.n, "mean": shift.mean, "lo": shift.lo, "hi": shift.hi, "mde": shift.mde(tol, level)}
    return shift


def shift_verdict(ref: CorpusBumps, other: CorpusBumps, tol: float = DEFAULT_TOL, level: float = LEVEL) -> dict:
    """The verdict of one counterfactual against the reference (module docstring)."""
    out = {"corpus": other.name, "newline_peak": other.newline_peak, "votes": False, "verdict": INCONCLUSIVE,
           "predicted_shift": None, "shift": None}
    if ref.newline_peak is None or other.newline_peak is None:
        out["reason"] = "no sharp newline peak: the corpus has no line width to follow"
        return out
    predicted = other.newline_peak - ref.newline_peak
    out["predicted_shift"] = predicted
    if abs(predicted) <= tol:
        out["reason"] = f"the newline peak moved by {predicted} lags, within the tolerance {tol:g}"
        return out
    out["votes"] = True
    shift = record_shift(out, ref, other, tol, level)
    if shift is None:
        return out
    lo, hi = shift.lo - tol, shift.hi + tol
    has_line, has_zero = lo <= predicted <= hi, lo <= 0 <= hi
    if has_line and not has_zero:
        out["verdict"], out["reason"] = TRACKS, "the shift's interval holds the line prediction, not 0"
    elif has_zero and not has_line:
        out["verdict"], out["reason"] = STAYS, "the shift's interval holds 0, not the line prediction"
    else:
        out["reason"] = ("the interval holds both predictions: too wide to tell" if has_line
                         else "the interval holds neither prediction: the bump moved elsewhere")
    return out


def combine(votes: list[str]) -> str:
    """The overall verdict of the voting corpora's: every one tracks -> tracks; every one stays
    -> stays; otherwise (or no vote) inconclusive."""
    if votes and all(v == TRACKS for v in votes):
        return TRACKS
    if votes and all(v == STAYS for v in votes):
        return STAYS
    return INCONCLUSIVE


def study_verdict(corpora: list[CorpusBumps], reference: str = "original", tol: float = DEFAULT_TOL,
                  level: float = LEVEL) -> dict:
    """The study's summary row: per corpus its bump interval and shift verdict, and the overall one."""
    by_name = {c.name: c for c in corpora}
    if reference not in by_name:
        raise ValueError(f"no reference corpus {reference!r} among {', '.join(by_name)}")
    ref = by_name[reference]
    per = []
    for c in corpora:
        iv = c.interval(level)
        row = {"corpus": c.name, "newline_peak": c.newline_peak, "bumps": dict(c.bumps),
               "bump": None if iv is None else {"n": iv.n, "mean": iv.mean, "lo": iv.lo, "hi": iv.hi}}
        if c.name != reference:
            row.update({k: v for k, v in shift_verdict(ref, c, tol, level).items() if k != "corpus"})
        per.append(row)
    votes = [r["verdict"] for r in per if r.get("votes")]
    return {"verdict": combine(votes), "reference": reference, "tol": tol, "level": level, "voting": len(votes),
            "corpora": per}
