"""The line-wrap study's rules (issue 17; gpa-long Section 3.2): does the first-layer bump follow the
line width? Run and read by kernattn.studies.wrap.study; the report's claim (study_wrap) turns
the study's outcome into a verdict with studies.reading_verdict.

The same GPA rows are trained, with the same seeds, on the original corpus and on its
counterfactuals (kernattn.studies.wrap.text). Per run, the first-layer bump is read the way the
report reads it: the median over the first layer's heads of each bank's bump lag
(kernattn.studies.wrap.study.run_bump, on kernattn.tracks.char.analysis.banks.find_bump; heads
without a bump are left out; no bump in any head: None). Per corpus, the bump over seeds is the
mean with its Student t interval.

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

The unwrapped corpus and the paragraph counterfactuals (issue 25) vote by their own rules, beside
the rewrapped corpora's (`shift_verdict`): `unwrapped_vote`, `paragraphs_vote`, `row_verdict`.
Each corpus c is read on the seed-paired shift of the first-layer bump, bump_c - bump_o (o: the
original; Student t interval over the seeds with a bump in both, each end widened by `tol`
lags), against what each reading predicts. The premise (`premise`) puts the original
bump at the original's newline peak n_o, so "the bump goes to lag L" is a shift of L - n_o.
The paragraph lag of a corpus is its median paragraph length + 1 (a paragraph and the newline
after it, as the newline peak is a line and its newline): P_c.

unwrapped (no line break inside a paragraph; the paragraphs unchanged):
    line width:      the bump disappears, or moves to the paragraph lag P_c (the only newlines
                     left are the paragraph breaks): shift P_c - n_o
    paragraph scale: the bump stays: shift 0
  Rule: with at least two seeds whose original run has a bump, the bump is absent in more than
  `vanish_fraction` of them (pre-registered in paper_numbers.yaml, 001-bump-paragraph-scale): it
  disappeared, a vote for the line width. Otherwise, on the interval: it holds P_c - n_o and
  not 0: tracks; 0 and not P_c - n_o: stays; else inconclusive.

paragraphs_<n> (lines kept at the original's width, paragraphs of about n characters):
    line width:      the bump stays at the newline peak: shift n_c - n_o (about 0)
    paragraph scale: the bump moves to the paragraph lag: shift P_c - n_o
  Rule: the interval holds the line prediction and not the paragraph one: tracks; the paragraph
  one and not the line one: stays at paragraph scale (it moved with the paragraphs); else
  inconclusive. No vote without a sharp newline peak in either corpus, when the two predictions
  are within `tol` of each other, or when P_c lies beyond the lags the banks are read at.

Both vote like the rewrapped corpora: the row's verdict is "tracks" when every vote tracks,
"stays" when every vote stays, else inconclusive; a row whose premise fails is left out of the
study's verdict (`overall_verdict`: the premise-met rows' common verdict, else inconclusive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from . import words
from .levels import LEVEL, POWER

TRACKS = "the bump tracks the line width"
STAYS = "the bump stays at paragraph scale"
INCONCLUSIVE = words.INCONCLUSIVE   # the claim's word: the study's own verdict when neither reading wins
DEFAULT_TOL = 2.0


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


VANISHED = "the bump disappeared"


def _read(shift, line: int, paragraph: int, tol: float, says: tuple[str, str]) -> tuple[str, str]:
    """(verdict, reason) of a shift interval against the two readings' predicted shifts."""
    lo, hi = shift.lo - tol, shift.hi + tol
    has_line, has_para = lo <= line <= hi, lo <= paragraph <= hi
    if has_line and not has_para:
        return TRACKS, f"the shift's interval holds the line prediction, not the paragraph one: {says[0]}"
    if has_para and not has_line:
        return STAYS, f"the shift's interval holds the paragraph prediction, not the line one: {says[1]}"
    return INCONCLUSIVE, ("the interval holds both predictions: too wide to tell" if has_line
                                    else "the interval holds neither prediction: the bump moved elsewhere")


def _start(other: CorpusBumps, line, paragraph) -> dict:
    return {"corpus": other.name, "newline_peak": other.newline_peak, "votes": False,
            "verdict": INCONCLUSIVE, "predicted_shift": line, "paragraph_shift": paragraph,
            "shift": None}


def unwrapped_vote(ref: CorpusBumps, other: CorpusBumps, lag: int | None, tol: float,
                   vanish_fraction: float, level: float = LEVEL) -> dict:
    """The unwrapped corpus's vote (module docstring); `lag`: its paragraph lag P_c."""
    if ref.newline_peak is None or lag is None:
        return {**_start(other, None, 0), "reason": "no sharp newline peak on the original: no line width to lose"}
    out = {**_start(other, lag - ref.newline_peak, 0), "votes": True}
    seeds = sorted(s for s in ref.bumps.keys() & other.bumps.keys() if ref.bumps[s] is not None)
    gone = [s for s in seeds if other.bumps[s] is None]
    out["absent"] = {"seeds": gone, "of": len(seeds), "vanish_fraction": vanish_fraction}
    if len(seeds) < 2:  # as an interval needs two seeds, so does a disappearance
        out["reason"] = f"{len(seeds)} seed(s) with a bump on the original: too few to read"
        return out
    if len(gone) > vanish_fraction * len(seeds):
        out["verdict"] = TRACKS
        out["reason"] = (f"{VANISHED} in {len(gone)} of {len(seeds)} seeds (more than {vanish_fraction:g} of them): "
                         f"what the line-width reading predicts")
        return out
    shift = record_shift(out, ref, other, tol, level)
    if shift is not None:
        out["verdict"], out["reason"] = _read(shift, out["predicted_shift"], 0, tol, (
            f"it moved to the paragraph lag {lag}", "it stayed with the line breaks gone"))
    return out


def paragraphs_vote(ref: CorpusBumps, other: CorpusBumps, lag: int | None, max_lag: int,
                    tol: float, level: float = LEVEL) -> dict:
    """A paragraphs_<n> corpus's vote (module docstring); `lag`: its paragraph lag P_c."""
    if ref.newline_peak is None or other.newline_peak is None or lag is None:
        return {**_start(other, None, None), "reason": "no sharp newline peak: the corpus has no line width to keep"}
    line, paragraph = other.newline_peak - ref.newline_peak, lag - ref.newline_peak
    out = _start(other, line, paragraph)
    if lag > max_lag:
        out["reason"] = f"the paragraph lag {lag} is beyond the {max_lag} lags the banks are read at"
    elif abs(line - paragraph) <= tol:
        out["reason"] = f"the two readings predict shifts {line:+d} and {paragraph:+d}, within the tolerance {tol:g}"
    else:
        out["votes"] = True
        shift = record_shift(out, ref, other, tol, level)
        if shift is not None:
            out["verdict"], out["reason"] = _read(shift, line, paragraph, tol, (
                "the bump stayed at the line width", f"the bump moved to the paragraph lag {lag}"))
    return out


def row_verdict(corpora: list[CorpusBumps], kinds: dict[str, str], lags: dict[str, int | None],
                max_lag: int, tol: float, vanish_fraction: float, reference: str = "original") -> dict:
    """study_verdict with the unwrapped and paragraphs_<n> corpora voting by their own
    rules; `kinds`: each corpus's layout kind, `lags`: each corpus's paragraph lag."""
    out = study_verdict(corpora, reference, tol)
    by_name = {c.name: c for c in corpora}
    for entry in out["corpora"]:
        kind, c = kinds.get(entry["corpus"]), by_name[entry["corpus"]]
        if kind == "unwrapped":
            entry.update(unwrapped_vote(by_name[reference], c, lags.get(c.name), tol, vanish_fraction))
        elif kind == "paragraphs":
            entry.update(paragraphs_vote(by_name[reference], c, lags.get(c.name), max_lag, tol))
    votes = [e["verdict"] for e in out["corpora"] if e.get("votes")]
    out["voting"], out["verdict"] = len(votes), combine(votes)
    return out


def premise(bumps: dict, init_bumps: dict, newline_peak, tol: float,
            converged: tuple[bool, str] | None = None) -> tuple[bool, str]:
    """The wrap study's premise, per row: the original bump sits at the corpus newline peak
    (|mean bump - peak| <= tol), it moved from the bank at initialisation (|mean of the
    seed-paired shift| > tol), and, when `converged` (bank_gate's (passed, why)) is given, the
    bank has stopped moving. Without it, whether the bump "follows" a rewrap says nothing
    about gpa-long's reading."""
    import statistics

    found = [b for b in bumps.values() if b is not None]
    pairs = [bumps[s] - init_bumps[s] for s in bumps if bumps[s] is not None and init_bumps.get(s) is not None]
    if not found or newline_peak is None:
        return False, "no bump or no sharp newline peak on the original corpus"
    at_peak = abs(statistics.fmean(found) - newline_peak) <= tol
    moved = bool(pairs) and abs(statistics.fmean(pairs)) > tol
    why = (f"bump {statistics.fmean(found):.1f} vs newline peak {newline_peak} (tolerance {tol:g}); "
           f"moved from initialisation by {statistics.fmean(pairs):+.1f}" if pairs else
           f"bump {statistics.fmean(found):.1f} vs newline peak {newline_peak}; no bump at initialisation to compare")
    if converged is not None:
        return at_peak and moved and converged[0], f"{why}; {converged[1]}"
    return at_peak and moved, why


def overall_verdict(rows: list[dict]) -> str:
    """The study's verdict from the rows whose premise holds (a bank that has not settled at the
    newline peak says nothing about line width): their common verdict, else inconclusive. With
    no such row, every row's, for the record: the report then says the premise is not met."""
    judged = [r for r in rows if r.get("premise_met", True)] or rows
    verdicts = {r["verdict"] for r in judged}
    return verdicts.pop() if len(verdicts) == 1 else INCONCLUSIVE
