"""Issue 25: the unwrapped corpus and the paragraph counterfactual vote (kernattn.studies.wrap.votes),
on constructed bump readings with hand-computed intervals and known verdicts; the pre-registered
vanish_fraction; and the wrap claim's words for each vote."""

from __future__ import annotations

import math

import pytest

from kernattn.report.verdicts import line_wrap
from kernattn.studies.wrap import votes as wrap_votes

T975_2 = 4.302653  # t_{0.975, 2}: three seeds
HALF = T975_2 * 1.0 / math.sqrt(3)  # shifts with standard deviation 1 over three seeds: +-2.484
NEWLINE = 68  # the original's newline peak (the premise puts its bump there)


def cb(name: str, bumps, peak: int | None = NEWLINE) -> line_wrap.CorpusBumps:
    return line_wrap.CorpusBumps(name, peak, dict(enumerate(bumps)))


ORIGINAL = cb("original", (69.0, 70.0, 71.0))


# ----------------------------------------------------------------------------- unwrapped
@pytest.mark.parametrize("bumps, lag, verdict, words", [
    # the bump gone in 2 of 3 seeds (more than 0.5 of them): the line reading's prediction
    ((None, None, 70.0), 185, line_wrap.TRACKS, "the bump disappeared in 2 of 3 seeds"),
    # shifts 0, +1, -1: mean 0 +- 2.48 (+- 2 tol) holds 0, not 185 - 68 = 117: it stayed
    ((69.0, 71.0, 70.0), 185, line_wrap.STAYS, "it stayed with the line breaks gone"),
    # paragraphs of 99 characters: the lag 100, shift 32; shifts 31, 32, 30: mean 31 +- 2.48 holds 32, not 0
    ((100.0, 102.0, 101.0), 100, line_wrap.TRACKS, "it moved to the paragraph lag 100"),
    # shifts -29, -28, -30 hold neither 0 nor 117: the bump moved elsewhere
    ((40.0, 42.0, 41.0), 185, line_wrap.INCONCLUSIVE, "the interval holds neither prediction"),
    # shifts -29, -29, -29: no spread, so the rounding floor sd sqrt(2/12) (never a zero-width
    # interval): -29 +- 4.303 x 0.408 / sqrt(3) = 1.01 (+- 2 tol) holds neither 0 nor 117
    ((40.0, 41.0, 42.0), 185, line_wrap.INCONCLUSIVE, "the interval holds neither prediction"),
    # one seed of three gone is not a disappearance; the other two stayed (shifts 0, +1: mean 0.5
    # +- 12.71 x 0.5 = 6.35 on one df, holds 0, not 117)
    ((None, 70.0, 72.0), 185, line_wrap.STAYS, "it stayed with the line breaks gone"),
])
def test_the_unwrapped_corpus_votes(bumps, lag, verdict, words):
    out = line_wrap.unwrapped_vote(ORIGINAL, cb("unwrapped", bumps, None), lag, 2.0, 0.5)
    assert out["votes"] is True and out["verdict"] == verdict and words in out["reason"], out["reason"]
    assert (out["predicted_shift"], out["paragraph_shift"]) == (lag - NEWLINE, 0)


def test_the_unwrapped_interval_is_hand_computed():
    out = line_wrap.unwrapped_vote(ORIGINAL, cb("unwrapped", (69.0, 71.0, 70.0), None), 185, 2.0, 0.5)
    assert out["shift"]["mean"] == pytest.approx(0.0) and out["shift"]["hi"] == pytest.approx(HALF, rel=1e-6)
    assert out["absent"] == {"seeds": [], "of": 3, "vanish_fraction": 0.5}


def test_the_vanish_fraction_decides_a_split_of_seeds():
    """One of two seeds without a bump: not more than half (no interval from one pair); with the
    fraction at 0.4 it is a disappearance. One seed alone reads nothing (as an interval needs
    two); without a sharp original peak nothing votes."""
    two = cb("original", (69.0, 70.0))
    half = cb("unwrapped", (None, 70.0), None)
    out = line_wrap.unwrapped_vote(two, half, 185, 2.0, 0.5)
    assert out["verdict"] == line_wrap.INCONCLUSIVE and out["reason"].startswith("1 seed(s) with a bump in both")
    assert line_wrap.unwrapped_vote(two, half, 185, 2.0, 0.4)["verdict"] == line_wrap.TRACKS
    one = line_wrap.unwrapped_vote(cb("original", (69.0,)), cb("unwrapped", (None,), None), 185, 2.0, 0.5)
    assert one["verdict"] == line_wrap.INCONCLUSIVE and "1 seed(s) with a bump on the original" in one["reason"]
    flat = line_wrap.unwrapped_vote(cb("original", (69.0, 70.0), None), half, 185, 2.0, 0.5)
    assert flat["votes"] is False and "no sharp newline peak on the original" in flat["reason"]


# ----------------------------------------------------------------------------- paragraphs_<n>
@pytest.mark.parametrize("bumps, peak, lag, votes, verdict, words", [
    # lines kept (peak 68), paragraphs of 98: lag 99. Shifts 0, +1, -1 hold 0, not 31: the line width
    ((69.0, 71.0, 70.0), 68, 99, True, line_wrap.TRACKS, "the bump stayed at the line width"),
    # shifts 31, 32, 30: 31 +- 2.48 (+- 2 tol) holds 31, not 0: the paragraph lag
    ((100.0, 102.0, 101.0), 68, 99, True, line_wrap.STAYS, "the bump moved to the paragraph lag 99"),
    ((84.0, 86.0, 85.0), 68, 99, True, line_wrap.INCONCLUSIVE, "holds neither"),
    # shifts 31, 31, 31: the rounding floor's interval 31 +- 1.01 (+- 2 tol) holds 31, not 0
    ((100.0, 101.0, 102.0), 68, 99, True, line_wrap.STAYS, "the bump moved to the paragraph lag 99"),
    # paragraphs beyond the context the banks are read at (128): no vote
    ((69.0, 71.0, 70.0), 68, 200, False, line_wrap.INCONCLUSIVE, "beyond the 128 lags"),
    # predictions 0 and +1 within the tolerance: no vote
    ((69.0, 71.0, 70.0), 68, 69, False, line_wrap.INCONCLUSIVE, "within the tolerance 2"),
    ((69.0, 71.0, 70.0), None, 99, False, line_wrap.INCONCLUSIVE, "no sharp newline peak"),
])
def test_the_paragraph_counterfactual_votes(bumps, peak, lag, votes, verdict, words):
    out = line_wrap.paragraphs_vote(ORIGINAL, cb("paragraphs_100", bumps, peak), lag, 128, 2.0)
    assert (out["votes"], out["verdict"]) == (votes, verdict) and words in out["reason"], out["reason"]
    if peak is not None:
        assert (out["predicted_shift"], out["paragraph_shift"]) == (peak - NEWLINE, lag - NEWLINE)


# ----------------------------------------------------------------------------- the row
def test_every_corpus_votes_in_the_row_verdict():
    """Rewrapped at 50 (peak 51: the line reading predicts -17), unwrapped, paragraphs_100: all
    three for the line width -> tracks; all three for the paragraph reading -> stays; split ->
    inconclusive. Before issue 25 the unwrapped corpus never voted and paragraphs_100 (its
    newline peak unmoved) did not either."""
    kinds = {"rewrapped": "rewrapped", "unwrapped": "unwrapped", "paragraphs_100": "paragraphs"}
    lags = {"original": 185, "rewrapped": 185, "unwrapped": 185, "paragraphs_100": 99}

    def row(rewrapped, unwrapped, paragraphs):
        corpora = [ORIGINAL, cb("rewrapped", rewrapped, 51), cb("unwrapped", unwrapped, None),
                   cb("paragraphs_100", paragraphs)]
        return line_wrap.row_verdict(corpora, kinds, lags, 128, 2.0, 0.5)

    line = row((52.0, 54.0, 53.0), (None, None, None), (69.0, 71.0, 70.0))
    assert line["verdict"] == line_wrap.TRACKS and line["voting"] == 3
    assert [c.get("votes", False) for c in line["corpora"]] == [False, True, True, True]
    para = row((69.0, 71.0, 70.0), (70.0, 69.0, 71.0), (100.0, 102.0, 101.0))
    assert para["verdict"] == line_wrap.STAYS and para["voting"] == 3
    split = row((52.0, 54.0, 53.0), (70.0, 69.0, 71.0), (69.0, 71.0, 70.0))
    assert split["verdict"] == line_wrap.INCONCLUSIVE
    before = line_wrap.study_verdict([ORIGINAL, cb("unwrapped", (None, None, None), None),
                                      cb("paragraphs_100", (69.0, 71.0, 70.0))], "original", 2.0)
    assert before["voting"] == 0  # what the rule changed


def test_the_claim_reads_every_vote():
    """The wrap claim names each voting corpus: a shift with both predictions, or why it has
    none (the bump disappeared); a disappearance and a line-width paragraph vote -> inconsistent."""
    from kernattn.report.verdicts import studies
    from kernattn.studies.wrap.report import _wrap_claim, wrap_context

    kinds = {"unwrapped": "unwrapped", "paragraphs_100": "paragraphs"}
    corpora = [ORIGINAL, cb("unwrapped", (None, None, None), None), cb("paragraphs_100", (69.0, 71.0, 70.0))]
    verdict = line_wrap.row_verdict(corpora, kinds, {"unwrapped": 185, "paragraphs_100": 99}, 128, 2.0, 0.5)
    peak = {"sharp": 68, "peak": 68, "contrast": 16.0, "line_peak": 67, "paragraph_median": 184.0}
    summary = {"study": "wrap", "scale": "tiny", "width": 50, "tol": 2.0, "reference": "original",
               "corpora": ["original", "unwrapped", "paragraphs_100"],
               "peaks": {"original": peak, "unwrapped": {**peak, "sharp": None},
                         "paragraphs_100": {**peak, "paragraph_median": 98.0}},
               "rows": [{"row": "gpa_m64", **verdict, "premise_met": True, "premise_why": "at the peak"}],
               "bumps": [], "rows_not_trained": [], "verdict": verdict["verdict"]}
    res = _wrap_claim({"id": wrap_votes.CLAIM_ID}, wrap_context(summary), "tiny")
    assert res.verdict == studies.reading_verdict(line_wrap.TRACKS, line_wrap.STAYS, line_wrap.TRACKS)
    assert "gpa_m64 unwrapped: the bump disappeared in 3 of 3 seeds" in res.ours
    # MDE: tol 2 + (t_{0.975,2} 4.3027 + t_{0.8,2} 1.0607) x se 1/sqrt(3) = 5.10 lags
    assert ("gpa_m64 paragraphs_100: shift +0.0 [-2.5, +2.5] lags (MDE 5.1), line prediction +0, "
            "paragraph prediction +31") in res.ours
    assert res.estimate == pytest.approx(0.0)  # the one vote with an interval


def test_the_vanish_fraction_is_pre_registered():
    from kernattn.page.build import load_paper_numbers

    claim = next(c for c in load_paper_numbers()["claims"] if c["id"] == wrap_votes.CLAIM_ID)
    assert wrap_votes.vanish_fraction() == float(claim["vanish_fraction"]) == 0.5
    assert wrap_votes.paragraph_lag({"paragraph_median": 97.5}) == 99  # round half to even, + 1
    assert wrap_votes.paragraph_lag({"paragraph_median": None}) is None


def test_a_shift_without_spread_has_the_rounding_floor():
    """Every seed shifted by exactly -17 (integer lags): the interval is not of zero width but
    uses the rounding sd sqrt(2/12) = 0.408: -17 +- 4.303 x 0.408 / sqrt(3) = +-1.014."""
    out = line_wrap.shift_verdict(ORIGINAL, cb("rewrapped", (52.0, 53.0, 54.0), 51), 2.0)
    half = T975_2 * math.sqrt(2 / 12) / math.sqrt(3)
    assert out["shift"]["lo"] == pytest.approx(-17 - half) and out["shift"]["hi"] == pytest.approx(-17 + half)
    assert out["verdict"] == line_wrap.TRACKS
