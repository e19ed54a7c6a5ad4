"""The votes of the unwrapped corpus and of the paragraph counterfactuals (issue 25), beside the
rewrapped corpora's (kernattn.studies.wrap.bumpshift.shift_verdict).

Each corpus c is read on the seed-paired shift of the first-layer bump, bump_c - bump_o (o: the
original; Student t interval over the seeds with a bump in both, each end widened by `tol`
lags), against what each reading predicts. The premise (study.premise) puts the original
bump at the original's newline peak n_o, so "the bump goes to lag L" is a shift of L - n_o.
The paragraph lag of a corpus is its median paragraph length + 1 (a paragraph and the newline
after it, as the newline peak is a line and its newline): P_c.

unwrapped (no line break inside a paragraph; the paragraphs unchanged):
    line width:      the bump disappears, or moves to the paragraph lag P_c (the only newlines
                     left are the paragraph breaks): shift P_c - n_o
    paragraph scale: the bump stays: shift 0
  Rule: with at least two seeds whose original run has a bump, the bump is absent in more than
  `vanish_fraction` of them (pre-registered in paper_numbers.yaml, 001-bump-paragraph-scale): it
  disappeared, a vote for the line width. Otherwise, on the interval: it holds P_c - n_o and not 0: tracks; 0 and not
  P_c - n_o: stays; else inconclusive.

paragraphs_<n> (lines kept at the original's width, paragraphs of about n characters):
    line width:      the bump stays at the newline peak: shift n_c - n_o (about 0)
    paragraph scale: the bump moves to the paragraph lag: shift P_c - n_o
  Rule: the interval holds the line prediction and not the paragraph one: tracks; the paragraph
  one and not the line one: stays at paragraph scale (it moved with the paragraphs); else
  inconclusive. No vote without a sharp newline peak in either corpus, when the two predictions
  are within `tol` of each other, or when P_c lies beyond the lags the banks are read at.

Both vote like the rewrapped corpora: the row's verdict is "tracks" when every vote tracks,
"stays" when every vote stays, else inconclusive; a row whose premise fails is left out of the
study's verdict (study.overall_verdict).
"""

from __future__ import annotations

from . import bumpshift

VANISHED = "the bump disappeared"
CLAIM_ID = "001-bump-paragraph-scale"


def paragraph_lag(peaks: dict) -> int | None:
    """P_c of a corpus's newline_peak() record: its median paragraph length + 1."""
    median = peaks.get("paragraph_median")
    return None if median is None else round(median) + 1


def _read(shift, line: int, paragraph: int, tol: float, words: tuple[str, str]) -> tuple[str, str]:
    """(verdict, reason) of a shift interval against the two readings' predicted shifts."""
    lo, hi = shift.lo - tol, shift.hi + tol
    has_line, has_para = lo <= line <= hi, lo <= paragraph <= hi
    if has_line and not has_para:
        return bumpshift.TRACKS, f"the shift's interval holds the line prediction, not the paragraph one: {words[0]}"
    if has_para and not has_line:
        return bumpshift.STAYS, f"the shift's interval holds the paragraph prediction, not the line one: {words[1]}"
    return bumpshift.INCONCLUSIVE, ("the interval holds both predictions: too wide to tell" if has_line
                                    else "the interval holds neither prediction: the bump moved elsewhere")


def _start(other: bumpshift.CorpusBumps, line, paragraph) -> dict:
    return {"corpus": other.name, "newline_peak": other.newline_peak, "votes": False,
            "verdict": bumpshift.INCONCLUSIVE, "predicted_shift": line, "paragraph_shift": paragraph,
            "shift": None}


def unwrapped_vote(ref: bumpshift.CorpusBumps, other: bumpshift.CorpusBumps, lag: int | None, tol: float,
                   vanish_fraction: float, level: float = bumpshift.LEVEL) -> dict:
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
        out["verdict"] = bumpshift.TRACKS
        out["reason"] = (f"{VANISHED} in {len(gone)} of {len(seeds)} seeds (more than {vanish_fraction:g} of them): "
                         f"what the line-width reading predicts")
        return out
    shift = bumpshift.record_shift(out, ref, other, tol, level)
    if shift is not None:
        out["verdict"], out["reason"] = _read(shift, out["predicted_shift"], 0, tol, (
            f"it moved to the paragraph lag {lag}", "it stayed with the line breaks gone"))
    return out


def paragraphs_vote(ref: bumpshift.CorpusBumps, other: bumpshift.CorpusBumps, lag: int | None, max_lag: int,
                    tol: float, level: float = bumpshift.LEVEL) -> dict:
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
        shift = bumpshift.record_shift(out, ref, other, tol, level)
        if shift is not None:
            out["verdict"], out["reason"] = _read(shift, line, paragraph, tol, (
                "the bump stayed at the line width", f"the bump moved to the paragraph lag {lag}"))
    return out


def row_verdict(corpora: list[bumpshift.CorpusBumps], kinds: dict[str, str], lags: dict[str, int | None],
                max_lag: int, tol: float, vanish_fraction: float, reference: str = "original") -> dict:
    """bumpshift.study_verdict with the unwrapped and paragraphs_<n> corpora voting by their own
    rules; `kinds`: each corpus's layout kind, `lags`: each corpus's paragraph lag."""
    out = bumpshift.study_verdict(corpora, reference, tol)
    by_name = {c.name: c for c in corpora}
    for entry in out["corpora"]:
        kind, c = kinds.get(entry["corpus"]), by_name[entry["corpus"]]
        if kind == "unwrapped":
            entry.update(unwrapped_vote(by_name[reference], c, lags.get(c.name), tol, vanish_fraction))
        elif kind == "paragraphs":
            entry.update(paragraphs_vote(by_name[reference], c, lags.get(c.name), max_lag, tol))
    votes = [e["verdict"] for e in out["corpora"] if e.get("votes")]
    out["voting"], out["verdict"] = len(votes), bumpshift.combine(votes)
    return out


def shipped_paper_numbers() -> dict:
    """The shipped paper_numbers.yaml, whose pre-registered rules the study applies (the report
    judges its claims under the same file)."""
    from importlib import resources

    import yaml

    return yaml.safe_load(resources.files("kernattn").joinpath("report/paper_numbers.yaml").read_text(encoding="utf-8"))


def vanish_fraction() -> float:
    """The pre-registered vanish_fraction of the claim 001-bump-paragraph-scale in the shipped
    paper_numbers.yaml."""
    where = "src/kernattn/report/paper_numbers.yaml"
    doc = shipped_paper_numbers()
    claim = next((c for c in (doc or {}).get("claims", []) if c.get("id") == CLAIM_ID), {})
    try:
        value = float(claim["vanish_fraction"])
    except (KeyError, TypeError, ValueError):
        value = -1.0
    if not 0 <= value < 1:
        raise ValueError(f"{where}: claim {CLAIM_ID} needs vanish_fraction, a number in [0, 1) fixed before the "
                         f"runs (got {claim.get('vanish_fraction')!r}); restore it from git")
    return value
