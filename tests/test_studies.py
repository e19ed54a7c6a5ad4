"""Issue 17, the line-wrap study's data side: line and paragraph lengths, the counterfactual
corpora (rewrapped, unwrapped), analyze-corpus's new outputs, and the bump-per-corpus verdict,
on constructed inputs with known answers and on the Dickens mirror."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from kernattn import cli
from kernattn.report.verdicts import line_wrap
from kernattn.studies.wrap import study as wrap_study, text as wrap
from kernattn.tracks.char.analysis import newlines
from kernattn.tracks.char.corpus import (
    build_vocab,
    clean_characters,
    normalize_newlines,
    strip_gutenberg,
)
from kernattn.tracks.char.data import encode
from tests import paths

REPO = Path(__file__).resolve().parents[1]
DICKENS = paths.DICKENS
PNG = b"\x89PNG\r\n\x1a\n"


def ids_of(text: str):
    chars = sorted(set(text) | {"\n"})
    return encode(text, chars), chars, chars.index("\n")


def hard_wrapped(n_paragraphs: int, words_per_paragraph: int, word_len: int, seed: int = 0,
                 doubles: float = 0.3) -> str:
    """Paragraphs of words of `word_len` letters, hard-wrapped irregularly (3 to 9 words a
    line, a fraction `doubles` of the lines double-spaced), blank-line separated: an original
    to re-lay out."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    paragraphs = []
    for _ in range(n_paragraphs):
        words = ["".join(rng.choice(letters, word_len)) for _ in range(words_per_paragraph)]
        lines, i = [], 0
        while i < len(words):
            k = int(rng.integers(3, 10))
            lines.append(("  " if rng.random() < doubles else " ").join(words[i:i + k]))
            i += k
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs) + "\n"


# ----------------------------------------------------------------------------- lines and paragraphs
def test_line_and_paragraph_lengths_of_a_known_text():
    ids, _, nl = ids_of("ab\ncde\n\nf\n\n\nghij")
    assert newlines.line_lengths(ids, nl).tolist() == [2, 3, 0, 1, 0, 0, 4]
    # "ab\ncde" counts its inner newline: 6; then "f" and "ghij"
    assert newlines.paragraph_lengths(ids, nl).tolist() == [6, 1, 4]
    ids, _, nl = ids_of("\n\nxy\n")
    assert newlines.line_lengths(ids, nl).tolist() == [0, 0, 2, 0]
    assert newlines.paragraph_lengths(ids, nl).tolist() == [2]
    ids, _, nl = ids_of("\n\n\n")
    assert newlines.paragraph_lengths(ids, nl).size == 0


def test_binned_peak_and_peak_contrast():
    counts = np.zeros(41)
    counts[[3, 12, 13, 14]] = [5, 2, 2, 2]  # the 1-length mode is 3, the 10-wide bin 11..20 holds 6
    assert newlines.binned_peak(counts, 10) == 15.5
    assert newlines.binned_peak(counts, 1) == 3.0
    assert newlines.binned_peak(np.zeros(5), 10) is None
    flat = np.full(50, 10.0)
    flat[30] = 12.0
    assert newlines.peak_contrast(flat, 30) == pytest.approx(12 / np.mean(flat[2:]))
    assert newlines.sharp_peak(flat) is None  # a flat histogram has no line structure
    spiky = flat.copy()
    spiky[30] = 1000.0
    assert newlines.sharp_peak(spiky) == 30


# ----------------------------------------------------------------------------- the counterfactuals
@pytest.mark.parametrize("width, word_len", [(50, 2), (59, 3), (29, 4)])
def test_rewrapped_lines_peak_at_the_width_and_newlines_at_width_plus_one(width, word_len):
    # (width + 1) is a multiple of (word_len + 1): single-spaced greedy lines are filled to exactly `width`
    per_line = (width + 1) // (word_len + 1)
    text = hard_wrapped(12, 3 * per_line + 1, word_len, doubles=0.0)
    out = wrap.rewrap(text, width)
    ids, _, nl = ids_of(out)
    lines = newlines.line_lengths(ids, nl)
    assert lines.max() == width
    assert newlines.main_peak(np.bincount(lines[lines > 0]), min_lag=1) == width
    counts, _ = newlines.histogram(newlines.separations(ids, nl), 200)
    assert newlines.main_peak(counts) == width + 1 and newlines.sharp_peak(counts) == width + 1
    assert set(out) <= set(text)
    assert out.split() == text.split()  # the same words in the same order
    assert out.count("\n\n") == text.count("\n\n")  # every paragraph break kept


def test_unwrapped_has_one_line_per_paragraph():
    text = hard_wrapped(10, 25, 3, doubles=0.0)  # single spaces: every paragraph 25 x 4 - 1 characters
    out = wrap.unwrap(text)
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    ids, _, nl = ids_of(out)
    seps = newlines.separations(ids, nl)
    # only paragraph-scale separations: each paragraph's length + 1, and the breaks (1)
    lengths = {len(p) for p in paragraphs if p}
    assert set(seps[seps > 1].tolist()) <= {n + 1 for n in lengths} and lengths == {25 * 4 - 1}
    assert out.split() == text.split() and set(out) <= set(text)
    assert wrap.unwrap(wrap.rewrap(text, 17)) == out  # rewrapping does not change the paragraphs
    assert wrap.relayout(text, "original") == text
    with pytest.raises(ValueError, match="unknown corpus layout"):
        wrap.relayout(text, "sideways")
    with pytest.raises(ValueError, match="width"):
        wrap.rewrap(text, 0)


def test_transform_split_keeps_the_vocabulary_and_the_split():
    text = hard_wrapped(8, 30, 5)
    ids, chars, _ = ids_of(text)
    cut = len(ids) // 2
    train, val = wrap.transform_split(ids[:cut], ids[cut:], chars, "rewrapped", 40)
    assert train.dtype == np.uint8 and set(np.unique(np.concatenate([train, val]))) <= set(np.unique(ids))
    assert "".join(chars[i] for i in val) == wrap.rewrap(text[cut:], 40)  # each split on its own
    np.testing.assert_array_equal(wrap.encode_with(text, chars), encode(text, chars))
    with pytest.raises(ValueError, match="'!'"):
        wrap.encode_with("ab!", chars)


# ----------------------------------------------------------------------------- the mirror
@pytest.fixture(scope="module")
def mirror():
    assert DICKENS.is_file(), f"{DICKENS} is missing: tests read the shared data beside the repository"
    with gzip.open(DICKENS, "rb") as fh:
        raw = fh.read().decode("utf-8", errors="replace")
    text, _ = normalize_newlines(raw)
    text, _ = strip_gutenberg(text)
    text, _ = clean_characters(text)
    chars, ids = build_vocab(text)
    return ids, chars, chars.index("\n")


def summary_of(ids, nl):
    from kernattn.tracks.char.analysis.corpus import length_summary

    counts, _ = newlines.histogram(newlines.separations(ids, nl), 400)
    _, lines = length_summary(newlines.line_lengths(ids, nl), 400, paragraphs=False)
    _, paras = length_summary(newlines.paragraph_lengths(ids, nl), 3000, paragraphs=True)
    return newlines.sharp_peak(counts), lines, paras


def test_mirror_lines_are_the_newline_peak_and_the_counterfactuals_move_it(mirror):
    """science.md: lines most often 63-68 characters, median 65; newline peak 68; paragraphs
    median 184. Rewrapped at 50 the peak goes to 51; unwrapped there is no sharp peak."""
    ids, chars, nl = mirror
    peak, lines, paras = summary_of(ids, nl)
    assert peak == 68 and 63 <= lines["peak"] <= 68 and lines["median"] == 65 and peak == lines["peak"] + 1
    assert 175 <= paras["median"] <= 195
    cut = int(0.9 * len(ids))
    n_paragraphs = summary_of(ids[:cut], nl)[2]["count"]
    for kind, line_peak, newline_peak in (("rewrapped", 50, 51), ("unwrapped", None, None)):
        train, val = wrap.transform_split(ids[:cut], ids[cut:], chars, kind)
        assert set(np.unique(train)) | set(np.unique(val)) <= set(np.unique(ids))
        peak_c, lines_c, paras_c = summary_of(train, nl)
        assert peak_c == newline_peak and paras_c["count"] == n_paragraphs
        if line_peak is not None:
            assert lines_c["peak"] == line_peak


# ----------------------------------------------------------------------------- analyze-corpus
def test_analyze_corpus_writes_line_and_paragraph_lengths(tmp_path, capsys):
    """A corpus of paragraphs rewrapped at 30: lines peak at 30, newlines at 31."""
    text = wrap.rewrap(hard_wrapped(40, 31, 4, doubles=0.0), 29)  # 30 = 6 x (4 + 1): lines of 29 characters
    ids, chars, _ = ids_of(text)
    data = tmp_path / "data"
    data.mkdir()
    cut = int(0.8 * len(ids))
    np.save(data / "train.npy", ids[:cut])
    np.save(data / "val.npy", ids[cut:])
    (data / "vocab.json").write_text(json.dumps({"chars": chars, "size": len(chars)}))
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    doc["scales"]["micro"]["data"]["out_dir"] = str(data)
    doc["scales"]["micro"]["analysis"]["out_dir"] = str(tmp_path / "analysis")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(doc))
    assert cli.main(["analyze-corpus", "--params", str(params)]) == 0
    out = tmp_path / "analysis" / "corpus"
    train = json.loads((out / "summary.json").read_text())["splits"]["train"]
    assert train["peak"] == 30 and train["sharp_peak"] == 30 and train["lines"]["peak"] == 29
    assert train["paragraphs"]["median"] == 31 * 5 - 1  # 31 words of 4 letters and their spaces
    lines = pd.read_csv(out / "lines.csv")
    assert lines["train"].sum() + train["lines"]["overflow"] == train["lines"]["count"]
    assert int(lines.loc[lines["train"].idxmax(), "length"]) == 29
    paras = pd.read_csv(out / "paragraphs.csv")
    assert paras["train"].sum() == train["paragraphs"]["count"] and list(paras.columns) == ["length", "train", "val"]
    for png in ("newlines.png", "lengths.png"):
        assert (out / png).read_bytes()[:8] == PNG
    assert "line lengths peak at 29" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the verdict
def bank_with_bump(lag: int, n_lags: int = 129) -> np.ndarray:
    lags = np.arange(n_lags, dtype=float)
    return 5 * np.exp(-lags / 40) + np.exp(-((lags - lag) ** 2) / 8.0)


def test_run_bump_is_the_median_over_first_layer_heads():
    heads = np.stack([bank_with_bump(50), bank_with_bump(52), bank_with_bump(70), np.exp(-np.arange(129) / 9)])
    assert wrap_study.run_bump(heads, min_lag=10) == 52  # the monotone head has no bump
    assert wrap_study.run_bump(heads[3:], min_lag=10) is None


def corpora(orig, rewrapped, unwrapped=(None, None), peaks=(68, 51, None)):
    return [line_wrap.CorpusBumps(name, peak, dict(enumerate(b)))
            for name, peak, b in zip(("original", "rewrapped", "unwrapped"), peaks, (orig, rewrapped, unwrapped))]


@pytest.mark.parametrize("orig, rewrapped, verdict", [
    ((69, 70), (52, 54), line_wrap.TRACKS),        # shifts -17, -16: about [-25, -8] (51 - 68 = -17)
    ((69, 70), (52, 53), line_wrap.TRACKS),        # -17 on both: the rounding floor's sd, about [-23, -11]
    ((69, 71), (50, 53), line_wrap.TRACKS),        # shifts -19, -18: interval about [-25, -12]
    ((69, 70), (70, 70), line_wrap.STAYS),         # did not move
    ((69, 70), (60, 71), line_wrap.INCONCLUSIVE),  # shifts -9, +1: the interval holds 0 and -17
    ((69, 70), (99, 100), line_wrap.INCONCLUSIVE),  # moved, but away from the line width
    ((69, 70), (52, None), line_wrap.INCONCLUSIVE),  # one seed without a bump: no interval
])
def test_study_verdict_on_constructed_bumps(orig, rewrapped, verdict):
    out = line_wrap.study_verdict(corpora(orig, rewrapped, (40, 90)))
    assert out["verdict"] == verdict and out["voting"] == 1
    rows = {r["corpus"]: r for r in out["corpora"]}
    assert rows["unwrapped"]["votes"] is False and "no sharp newline peak" in rows["unwrapped"]["reason"]
    assert rows["rewrapped"]["predicted_shift"] == -17
    assert rows["original"]["bump"]["mean"] == pytest.approx(np.mean(orig))


def test_study_verdict_needs_a_moved_line_width_and_two_seeds():
    same_width = line_wrap.study_verdict(corpora((69, 70), (52, 53), peaks=(68, 69, None)))
    assert same_width["verdict"] == line_wrap.INCONCLUSIVE and same_width["voting"] == 0
    one_seed = line_wrap.study_verdict([line_wrap.CorpusBumps("original", 68, {0: 69.0}),
                                        line_wrap.CorpusBumps("rewrapped", 51, {0: 52.0})])
    assert one_seed["verdict"] == line_wrap.INCONCLUSIVE and one_seed["corpora"][0]["bump"]["lo"] is None
    two = line_wrap.study_verdict(corpora((69, 70), (52, 54)) + [line_wrap.CorpusBumps("w40", 41, {0: 70, 1: 70})])
    assert two["verdict"] == line_wrap.INCONCLUSIVE  # one counterfactual tracks, the other stays
    with pytest.raises(ValueError, match="no reference corpus"):
        line_wrap.study_verdict(corpora((69, 70), (52, 53)), reference="dickens")


# ----------------------------------------------------------------------------- the wrap study's controls
def test_corpus_names_parse_and_bad_ones_are_refused():
    from kernattn.config.studies import wrap_layout

    assert [wrap_layout(n, 50) for n in ("rewrapped", "rewrapped_30", "unwrapped", "planted_40", "paragraphs_100")] == [
        ("rewrapped", 50), ("rewrapped", 30), ("unwrapped", None), ("planted", 40), ("paragraphs", 100)]
    for bad in ("shuffled", "rewrapped_0", "planted", "planted_x", "rewrapped_30_1"):
        with pytest.raises(ValueError, match="unknown corpus"):
            wrap_layout(bad, 50)


def test_the_planted_period_is_the_only_newline_structure():
    """Every newline of planted_<p> is p + 1 characters after the previous one (the last line
    may be shorter); every other character is the original's, its newlines as spaces."""
    from kernattn.studies.wrap.layouts import planted, relayout

    text = hard_wrapped(6, 40, 5)
    out = planted(text, 37)
    ids, _, nl = ids_of(out)
    pos = np.flatnonzero(ids == nl)
    assert len(pos) > 10 and set(np.diff(pos).tolist()) == {38} and pos[0] == 37
    assert out.replace("\n", "") == text.replace("\n", " ")  # every other character as it was
    assert relayout(text, "planted_37", 50, 67) == out


def test_the_paragraph_counterfactual_keeps_the_line_width():
    """paragraphs_<n>: paragraphs of at most n characters (words of 5 letters: 95 holds 16
    words), lines at most the original width, every word kept."""
    from kernattn.studies.wrap.layouts import paragraphs

    text = hard_wrapped(5, 50, 5, doubles=0.0)
    out = paragraphs(text, 95, 30)
    paras = out.strip("\n").split("\n\n")
    assert all(len(p.replace("\n", " ")) <= 95 for p in paras) and len(paras) == -(-250 // 16)
    assert all(len(line) <= 30 for p in paras for line in p.split("\n"))
    assert " ".join(out.split()) == " ".join(text.split())


def test_planted_corpora_are_controls_that_never_vote():
    from kernattn.studies.wrap.study import split_controls

    corpora = [line_wrap.CorpusBumps(n, 68) for n in ("original", "rewrapped", "planted_40", "rewrapped_30")]
    voting, controls = split_controls(corpora, 50)
    assert [c.name for c in voting] == ["original", "rewrapped", "rewrapped_30"]
    assert [c.name for c in controls] == ["planted_40"]


# ----------------------------------------------------------------------------- no whitespace change beyond the layout
KNOWN = "ab cd\nef  gh\n\n\nij\nkl \nmn\n"  # a double space, a trailing space, a three-newline break


@pytest.mark.parametrize("corpus, out, counts", [
    # "ef  gh" is 6 > 5: the double space's last character breaks the line, one stays at its end
    ("rewrapped_5", "ab cd\nef \ngh\n\n\nij kl \nmn ",
     {"newlines_to_spaces": 2, "spaces_to_newlines": 1, "separators_changed": 3, "characters_changed": 3}),
    ("unwrapped", "ab cd ef  gh\n\n\nij kl  mn ",
     {"newlines_to_spaces": 4, "spaces_to_newlines": 0, "separators_changed": 4, "characters_changed": 4}),
    # paragraphs of at most 8 ("ab cd ef", "gh   ij", "kl  mn "), each wrapped at 5; "  " -> "\n\n" (2
    # characters), "\n\n\n" -> "  \n" (2 newlines to spaces, the old break gone), "\n" -> "\n\n" (1)
    ("paragraphs_8", "ab cd\nef\n\ngh  \nij\n\nkl \nmn ",
     {"newlines_to_spaces": 3, "spaces_to_newlines": 0, "paragraph_breaks_added": 2, "paragraph_breaks_removed": 1,
      "separators_changed": 4, "characters_changed": 6}),
    # the 7 newlines become spaces (25 characters), then a newline after every 4: 6 inserted
    ("planted_4", "ab c\nd ef\n  gh\n   i\nj kl\n  mn\n ",
     {"newlines_to_spaces": 7, "newlines_inserted": 6, "characters_changed": 13}),
])
def test_each_layout_changes_only_its_whitespace(corpus, out, counts):
    """Hand-laid-out corpora of a known text, and what wrap.checks counts in each; the double
    space and the trailing space survive every layout but the planted one's cuts."""
    from kernattn.studies.wrap.checks import whitespace_changes
    from kernattn.studies.wrap.layouts import relayout

    assert relayout(KNOWN, corpus, 50, 5) == out
    changes = whitespace_changes(KNOWN, out, corpus, 50)
    assert {k: changes[k] for k in counts} == counts
    assert (changes["characters"], changes["characters_out"]) == (len(KNOWN), len(out))


@pytest.mark.parametrize("corpus, out, words", [
    ("rewrapped", "ab cd\nef gh\n\n\nij\nkl \nmn\n", "'  ' became ' ' before word 3 ('gh'): only a newline"),
    ("unwrapped", "ab cd ef  gh\n\nij kl  mn ", "'\\n\\n\\n' became '\\n\\n' before word 4 ('ij'): a paragraph break"),
    ("rewrapped", "ab cd\n\nef  gh\n\n\nij\nkl \nmn\n", "before word 2 ('ef'): a paragraph break"),
    ("unwrapped", "ab cd ef  gh\n\n\nij kl  mo ", "non-whitespace characters differ from the original's before word 6"),
    ("paragraphs_8", "ab cd\nef\n\n\ngh  \nij\n\nkl \nmn ", "'  ' became '\\n\\n\\n' before word 3"),
    ("planted_4", "ab c\nd ef\n  gh\n   i\nj kl\n  mn\n", "not the original with newlines as spaces"),
    ("planted_4", "ab \ncd ef\n  gh\n   i\nj kl\n  mn\n ", "line 1 has 3 characters, not the planted period 4"),
])
def test_a_change_beyond_the_layout_is_refused(corpus, out, words):
    from kernattn.studies.wrap.checks import whitespace_changes

    with pytest.raises(ValueError) as err:
        whitespace_changes(KNOWN, out, corpus, 50)
    assert words in str(err.value), str(err.value)


def test_prepare_wrap_fails_loudly_on_a_layout_that_changes_more(tmp_path, monkeypatch):
    """prepare-wrap's write_corpus records what the layout changed in meta.json; a layout that
    collapses double spaces (what the study's corpora did before issue 25) stops it with one
    error naming the corpus folder, the params key and the fix, and writes nothing."""
    import dataclasses

    from kernattn.config import load_params
    from kernattn.errors import UsageError
    from kernattn.studies.wrap import data as wrap_data, layouts as wrap_layouts

    text = hard_wrapped(4, 30, 4)
    ids, chars, _ = ids_of(text)
    cut = len(ids) // 2
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "train.npy", ids[:cut])
    np.save(data / "val.npy", ids[cut:])
    (data / "vocab.json").write_text(json.dumps({"chars": chars, "size": len(chars)}))
    (data / "meta.json").write_text("{}")
    params = load_params(REPO / "params.yaml", "micro")
    params = dataclasses.replace(params, data=dataclasses.replace(params.data, out_dir=str(data)),
                                 studies=dataclasses.replace(params.studies, out_dir=str(tmp_path / "studies")))
    meta = wrap_data.write_corpus(params, "rewrapped_30")
    train = meta["whitespace_changes"]["train"]
    assert train["characters_out"] == train["characters"] == cut == meta["n_train"]
    assert train["spaces_to_newlines"] > 0 and meta["whitespace_changes"]["val"]["newlines_to_spaces"] > 0
    monkeypatch.setattr(wrap_layouts, "relayout", lambda t, *a: wrap.rewrap(t.replace("  ", " "), 30))
    with pytest.raises(UsageError) as err:
        wrap_data.write_corpus(params, "unwrapped")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'studies' / 'wrap' / 'data' / 'unwrapped'}: corpus 'unwrapped' of "
                              f"studies.wrap.corpora changes {data} beyond its layout (train split: the whitespace "
                              f"'  ' became ' '"), message
    assert "fix the layout" in message and not (tmp_path / "studies" / "wrap" / "data" / "unwrapped").exists()
