"""Any text corpus for the char track (issue 15, part 4): a corpus other than Dickens, given as a
local file, prepares and trains through the real CLI at micro scale under its own name, with
its own vocabulary; `data.clean` strips Gutenberg boilerplate only when asked; the corpus keys
are validated in one line each. Downloads with pinned sha256s: tests/test_downloads.py."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch
import yaml

from kernattn import cli
from kernattn.config import DataParams, ParamsError, load_params
from kernattn.tracks.char.data import decode, load_meta, load_split, load_vocab
from kernattn.tracks.char.corpus import prepare
from kernattn.fetch import DataError
from tests.paths import REPO

PARAMS = REPO / "params.yaml"
# Greek, Cyrillic, accented Latin letters (kept: fold_accents is off), guillemets and a dash:
# an alphabet the Dickens corpus does not have.
WORDS = ["αλφα ", "βήτα ", "γάμμα ", "δέλτα ", "ωμέγα ", "мир ", "слово ", "café ", "niño ", "über ",
         "«ναι» ", "— ", ". ", "\n"]


def synthetic_text(n_words: int = 1500, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(WORDS, size=n_words)) + "\n"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for key in ("KERNATTN_SCALE",):
        monkeypatch.delenv(key, raising=False)
    threads = torch.get_num_threads()  # the train stage sets train.threads: give it back
    yield
    torch.set_num_threads(threads)


def overrides(tmp_path, **data) -> str:
    path = tmp_path / "overrides.yaml"
    path.write_text(yaml.safe_dump({"data": data, "tracking": {"enabled": False}}, allow_unicode=True))
    return str(path)


def kernattn(over: str, stage: str, *args: str) -> int:
    return cli.main(["--overrides", over, stage, "--params", str(PARAMS), "--scale", "micro", *args])


@pytest.mark.e2e
def test_another_corpus_prepares_trains_and_is_analysed_under_its_own_name(tmp_path, monkeypatch, capsys):
    text = synthetic_text()
    src = tmp_path / "mix.txt.gz"
    src.write_bytes(gzip.compress(text.encode("utf-8")))
    monkeypatch.chdir(tmp_path)  # the default out_dirs are relative: results/micro/...
    over = overrides(tmp_path, corpus="greek_mix", mirror=str(src), clean="none", fold_accents=False)

    assert kernattn(over, "prepare") == 0
    assert "prepared corpus 'greek_mix'" in capsys.readouterr().out
    out = tmp_path / "results" / "micro" / "data" / "greek_mix"
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train.npy", "val.npy", "vocab.json"]
    assert not (tmp_path / "results" / "micro" / "data" / "dickens").exists()
    chars = load_vocab(out)
    assert chars == sorted(set(text)) and {"é", "ñ", "ü", "ω", "м", "«", "—"} <= set(chars)
    assert json.loads((out / "vocab.json").read_text(encoding="utf-8"))["size"] == len(set(text))
    assert decode(np.concatenate([load_split(out, "train"), load_split(out, "val")]), chars) == text
    meta = load_meta(out)
    assert meta["corpus"] == "greek_mix" and meta["cleaning"]["accents_folded_total"] == 0
    assert meta["sources"][0]["gutenberg"]["stripped"] is False

    assert kernattn(over, "train", "--run", "rope-s0", "--no-progress") == 0
    run_dir = tmp_path / "results" / "micro" / "runs" / "rope-s0"
    config = json.loads((run_dir / "config.json").read_text())
    final = json.loads((run_dir / "final.json").read_text())
    assert config["data"]["vocab_size"] == len(set(text)) and config["data"]["out_dir"] == "results/micro/data/greek_mix"
    assert final["steps"] == load_params(PARAMS, "micro").train.max_steps and np.isfinite(final["val_loss"])
    # a model over this vocabulary predicts no better than chance at step 0: ln(vocab) per char
    val = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
           if json.loads(line)["split"] == "val"]
    assert val[0]["loss"] == pytest.approx(np.log(len(set(text))), rel=0.1)

    # the corpus analysis reads the corpus from the params' paths, whatever its name
    assert kernattn(over, "analyze-corpus") == 0
    summary = json.loads((tmp_path / "results" / "micro" / "analysis" / "corpus" / "summary.json").read_text())
    assert summary["data_dir"] == "results/micro/data/greek_mix" and summary["newline_id"] == chars.index("\n")
    assert summary["splits"]["train"]["newlines"] == int(np.sum(load_split(out, "train") == chars.index("\n")))
    # and so does the GPA analysis of a GPA run trained on it (its samples are in this alphabet)
    assert kernattn(over, "train", "--run", "gpa_dp_m8-s0", "--no-progress") == 0
    assert kernattn(over, "analyze-gpa", "--run", "gpa_dp_m8-s0") == 0
    gpa_dir = tmp_path / "results" / "micro" / "analysis" / "gpa_dp_m8-s0"
    gpa = json.loads((gpa_dir / "summary.json").read_text())
    micro = load_params(PARAMS, "micro")
    assert gpa["generated"]["chars"] == micro.analysis.sample_chars
    assert len(gpa["first_layer_bumps"]) == micro.model.n_head
    samples = [json.loads(line) for line in (gpa_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert samples and set("".join(s["text"] for s in samples)) <= set(chars)


def test_a_corpus_without_newlines_stops_the_newline_analysis_in_one_line(tmp_path, monkeypatch, capsys):
    src = tmp_path / "one_line.txt"
    src.write_text(synthetic_text(400).replace("\n", " "), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    over = overrides(tmp_path, corpus="one_line", mirror=str(src), clean="none")
    assert kernattn(over, "prepare") == 0
    assert kernattn(over, "analyze-corpus") == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "results/micro/data/one_line/vocab.json: the corpus has no newline character" in err[0]
    assert "use another data.corpus" in err[0] and not (tmp_path / "results" / "micro" / "analysis").exists()


GUTENBERG_LIKE = (
    "The Project Gutenberg eBook of Stories, by Someone\n\nThis eBook is for the use of anyone.\n"
    "*** START OF THE PROJECT GUTENBERG EBOOK STORIES ***\n"
    "Chapter One\n\nA story of Ærø and Škoda.\n"
    "*** END OF THE PROJECT GUTENBERG EBOOK STORIES ***\n"
    "Section 1. General Terms of Use & licence $100 #\n"
)
GUTENBERG_BODY = "Chapter One\n\nA story of Ærø and Škoda.\n"


def _prepared(tmp_path, text: str, **data) -> tuple[str, list[str], dict]:
    src = tmp_path / "book.txt"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    meta = prepare(DataParams(mirror=str(src), out_dir=str(out), val_fraction=0.2, **data))
    chars = load_vocab(out)
    return decode(np.concatenate([load_split(out, "train"), load_split(out, "val")]), chars), chars, meta


def test_clean_gutenberg_strips_the_markers(tmp_path):
    text, chars, meta = _prepared(tmp_path, GUTENBERG_LIKE, clean="gutenberg")
    assert text == GUTENBERG_BODY and chars == sorted(set(GUTENBERG_BODY))
    gut = meta["sources"][0]["gutenberg"]
    assert gut["stripped"] and gut["style"] == "modern" and gut["chars_removed"] == len(GUTENBERG_LIKE) - len(text)
    assert meta["cleaning"]["clean"] == "gutenberg"


def test_clean_none_leaves_the_text_untouched(tmp_path):
    text, chars, meta = _prepared(tmp_path, GUTENBERG_LIKE, clean="none")
    assert text == GUTENBERG_LIKE and chars == sorted(set(GUTENBERG_LIKE))
    gut = meta["sources"][0]["gutenberg"]
    # the markers are seen and reported, but kept
    assert gut == {"stripped": False, "style": "modern", "works": 1, "chars_removed": 0, "reason": "data.clean: none"}


def test_fold_accents_is_the_dickens_choice_only(tmp_path):
    text, _, meta = _prepared(tmp_path, GUTENBERG_LIKE, clean="gutenberg", fold_accents=True)
    assert text == "Chapter One\n\nA story of Ærø and Skoda.\n"  # Š -> S; Æ and ø have no ASCII base letter
    assert meta["cleaning"]["accents_folded"] == {"Š->S": 1}


def test_clean_gutenberg_on_a_text_without_markers_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    src = tmp_path / "plain.txt"
    src.write_text(synthetic_text(200), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    over = overrides(tmp_path, corpus="plain", mirror=str(src), clean="gutenberg")
    assert kernattn(over, "prepare") == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"kernattn prepare: error: {src}: data.clean is 'gutenberg' but the text has no Project Gutenberg "
        f"START/END markers; set data.clean: none for a text that is not from Gutenberg, or check that this "
        f"is the intended file"]
    assert not (tmp_path / "results").exists()


def test_corpus_name_fills_out_dir_and_experiment(tmp_path):
    over = {"data": {"corpus": "wiki-fr_2"}}
    params = load_params(PARAMS, "tiny", over)
    assert params.data.out_dir == "results/tiny/data/wiki-fr_2"
    assert params.tracking.experiment == "kernattn-char-wiki-fr_2-tiny"
    dickens = load_params(PARAMS, "tiny")
    assert (dickens.data.out_dir, dickens.tracking.experiment) == ("results/tiny/data/dickens", "kernattn-char-dickens-tiny")
    # the YAML's two forms of a data.urls entry
    urls = load_params(PARAMS, "paper", {"data": {"urls": ["https://a.org/x.txt",
                                                          {"url": "https://b.org/y.txt.gz", "sha256": "AB" * 32}]}})
    assert [(u.url, u.sha256) for u in urls.data.urls] == [("https://a.org/x.txt", None),
                                                           ("https://b.org/y.txt.gz", "AB" * 32)]


BAD_KEYS = [
    ({"corpus": "my corpus"}, "data.corpus must be a name of letters, digits, '_' and '-'"),
    ({"corpus": "../elsewhere"}, "data.corpus must be a name of letters, digits, '_' and '-'"),
    ({"clean": "html"}, "data.clean must be one of gutenberg, none; got 'html'"),
    ({"fold_accents": "yes"}, "data.fold_accents must be bool, got 'yes'"),
    ({"urls": ["ftp://x.org/a.txt"]}, "data.urls[0].url must be an http:// or https:// address"),
    ({"urls": [{"url": "https://x.org/a.txt", "sha256": "abc"}]}, "data.urls[0].sha256 must be a sha256: 64 hexadecimal"),
    ({"urls": [{"url": "https://x.org/a.txt", "sha": "0" * 64}]}, "unknown key 'data.urls[0].sha'; allowed: url, sha256"),
    ({"urls": [{"sha256": "0" * 64}]}, "missing key 'data.urls[0].url'"),
    ({"urls": "https://x.org/a.txt"}, "data.urls must be a list"),
    ({"sha256": "0" * 63}, "data.sha256 must be a sha256: 64 hexadecimal"),
]


@pytest.mark.parametrize("data,needle", BAD_KEYS, ids=[next(iter(d)) + f"-{i}" for i, (d, _) in enumerate(BAD_KEYS)])
def test_bad_corpus_keys_are_one_line_errors(tmp_path, data, needle):
    over = tmp_path / "over.yaml"
    over.write_text(yaml.safe_dump({"data": data}))
    with pytest.raises(ParamsError) as info:
        load_params(PARAMS, "micro", [(str(over), {"data": data})])
    msg = str(info.value)
    assert needle in msg and msg.startswith(str(over)) and "\n" not in msg, msg


def test_an_empty_source_list_names_both_keys(tmp_path):
    with pytest.raises(DataError, match=r"no data source: set data\.dataset \(a catalogue data set\), data\.mirror \(a local file\) or data\.urls"):
        prepare(DataParams(corpus="nothing", out_dir=str(tmp_path / "out")))
    assert not (tmp_path / "out").exists()
