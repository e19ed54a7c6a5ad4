"""`kernattn prepare`: the Dickens mirror (93 symbols), cleaning, the 90/10 split, the download
path (a local http.server, the real urllib code), every error case, and atomic output."""

from __future__ import annotations

import collections
import gzip
import hashlib
import http.server
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml

from kernattn import cli
from kernattn.config import DataParams
from kernattn.config.char import UrlSource
from kernattn.tracks.char.data import decode, encode, load_meta, load_split, load_vocab
from kernattn import fetch
from kernattn.tracks.char.corpus import clean_characters, normalize_newlines, prepare, strip_gutenberg
from kernattn.fetch import DataError
from tests import paths

REPO = Path(__file__).resolve().parents[1]
MIRROR = paths.DICKENS
MIRROR_SHA = "ec50c5dfe43b7d0c96789f4a60782c6068c720513a7ba9540b5f677a7f3d19d9"
MIRROR_CONTENT_SHA = "b24c37886142e11d0ee687db6ab06f936207aa7f2ea1fd1d9a36763c7a507e6a"
needs_mirror = pytest.mark.skipif(not MIRROR.is_file(), reason=f"mirror file {MIRROR} not present")


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv("KERNATTN_DATA_MIRROR", raising=False)
    monkeypatch.delenv("KERNATTN_SCALE", raising=False)


def leftovers(folder: Path) -> list[str]:
    """Temporary names an atomic write could leave behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ----------------------------------------------------------------------------- the mirror
@pytest.fixture(scope="module")
def mirror_out(tmp_path_factory):
    if not MIRROR.is_file():
        pytest.skip(f"mirror file {MIRROR} not present")
    out = tmp_path_factory.mktemp("mirror") / "dickens"
    meta = prepare(DataParams(mirror=str(MIRROR), sha256=MIRROR_SHA, clean="gutenberg", fold_accents=True,
                              out_dir=str(out)))
    return out, meta


@needs_mirror
def test_mirror_vocabulary_is_93_symbols(mirror_out):
    out, meta = mirror_out
    chars = load_vocab(out)
    printable = [chr(c) for c in range(32, 127) if chr(c) not in "\\^|"]
    assert chars == ["\n", *printable]
    assert meta["vocab_size"] == 93 == len(chars)
    assert json.loads((out / "vocab.json").read_text()) == {"chars": chars, "size": 93}


@needs_mirror
def test_mirror_split_and_round_trip(mirror_out):
    out, meta = mirror_out
    train, val = load_split(out, "train"), load_split(out, "val")
    assert train.dtype == np.uint8 and val.dtype == np.uint8 and train.ndim == val.ndim == 1
    n = meta["n_chars"]
    assert n == 9_991_662 and (len(train), len(val)) == (meta["n_train"], meta["n_val"]) == (8_992_495, 999_167)
    assert len(train) == int(n * 0.9) and len(train) + len(val) == n
    text = decode(np.concatenate([train, val]), load_vocab(out))
    assert hashlib.sha256(text.encode()).hexdigest() == meta["cleaned_sha256"]
    # An independent reading of the README's facts: CP437, CRLF, one TAB, one final 0x1A.
    raw = gzip.decompress(MIRROR.read_bytes()).replace(b"\r\n", b"\n").replace(b"\t", b" ")
    assert raw.endswith(b"\n\x1a")
    expected = raw[:-1].decode("cp437").translate(str.maketrans("\u00e2\u00e7\u00ea\u00e8", "acee"))
    assert text == expected
    assert meta["newlines"] == text.count("\n") == 200_783


@needs_mirror
def test_mirror_meta_records_source_and_cleaning(mirror_out):
    out, meta = mirror_out
    assert load_meta(out) == meta
    assert meta["source_kind"] == "mirror" and meta["raw_sha256"] == MIRROR_SHA and meta["sha256_checked"]
    (src,) = meta["sources"]
    assert src["stored_sha256"] == MIRROR_SHA and src["content_sha256"] == MIRROR_CONTENT_SHA
    assert src["encoding"] == "cp437" and src["compressed"] and src["content_bytes"] == 10_192_446
    assert src["gutenberg"]["stripped"] is False and src["gutenberg"]["works"] == 14
    cl = meta["cleaning"]
    assert cl["crlf_to_lf"] == 200_783 and cl["tab_to_space"] == 1
    assert cl["removed"] == {"control": {"U+001A": 1}} and cl["removed_total"] == 1
    assert cl["accents_folded"] == {"\u00e2->a": 4, "\u00e7->c": 2, "\u00e8->e": 1, "\u00ea->e": 1}
    assert meta["created_utc"].endswith("+00:00")
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train.npy", "val.npy", "vocab.json"]


# ----------------------------------------------------------------------------- cleaning
MODERN = (
    "\ufeffThe Project Gutenberg eBook of Test, by Someone\r\n\r\nThis eBook is for the use of anyone\r\n"
    "*** START OF THE PROJECT GUTENBERG EBOOK TEST ***\r\n"
    "\r\nChapter 1\r\n\r\nIt was the\x07 best\u200b of\ttimes.\r\n\r\n"
    "*** END OF THE PROJECT GUTENBERG EBOOK TEST ***\r\n"
    "Section 1. General Terms of Use $100 %\r\n"
)
MODERN_BODY = "\nChapter 1\n\nIt was the best of times.\n\n"


def test_crlf_and_cr_become_lf():
    text, stats = normalize_newlines("a\r\nb\rc\n")
    assert text == "a\nb\nc\n" and stats["crlf_to_lf"] == 1 and stats["cr_to_lf"] == 1


def test_modern_gutenberg_header_footer_and_characters():
    text, _ = normalize_newlines(MODERN)
    body, gut = strip_gutenberg(text)
    assert gut == {"style": "modern", "works": 1, "chars_removed": len(text) - len(body)}
    clean, stats = clean_characters(body)
    assert clean == MODERN_BODY
    assert stats["removed"] == {"control": {"U+0007": 1}, "format": {"U+200B": 1}}
    assert stats["tab_to_space"] == 1


OLD_WORK = (
    "**The Project Gutenberg Etext of {t}**\r\nPlease take a look at the important information\r\n"
    "***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***\r\nlegal $ # % text\r\n"
    "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\r\n"
    "{t} text, Ch\u00e2lons.\r\n\r\n{extra}End of the Project Gutenberg Etext of {t}\r\n\r\n"
)


def test_old_style_concatenation_keeps_each_body():
    raw = (OLD_WORK.format(t="One", extra="")
           + OLD_WORK.format(t="Two", extra="End of The Project Gutenberg Etext of Two\r\n\r\nPREFACE kept\r\n\r\n"))
    text, _ = normalize_newlines(raw)
    body, gut = strip_gutenberg(text)
    assert gut["style"] == "old" and gut["works"] == 2
    assert body == ("One text, Ch\u00e2lons.\n\n"
                    "Two text, Ch\u00e2lons.\n\nEnd of The Project Gutenberg Etext of Two\n\nPREFACE kept\n\n")
    clean, stats = clean_characters(body)
    assert "Chalons" in clean and stats["accents_folded"] == {"\u00e2->a": 2}


def test_text_without_markers_passes_unchanged():
    text = "No header here.\nEnd of the chapter.\n*** not a marker ***\n"
    assert strip_gutenberg(text) == (text, {"style": None, "works": 0, "chars_removed": 0})
    assert clean_characters(text)[0] == text


def test_printable_non_ascii_is_kept():
    clean, stats = clean_characters("\u201cquoted\u201d \u00a31 \u00e6\n")
    assert clean == "\u201cquoted\u201d \u00a31 \u00e6\n" and stats["removed_total"] == 0


def test_synthetic_mirror_end_to_end(tmp_path):
    src = tmp_path / "book.txt.gz"
    src.write_bytes(gzip.compress(MODERN.encode("utf-8")))
    out = tmp_path / "out"
    meta = prepare(DataParams(mirror=str(src), out_dir=str(out), val_fraction=0.25, clean="gutenberg"))
    chars = load_vocab(out)
    assert chars == sorted(set(MODERN_BODY))
    ids = np.concatenate([load_split(out, "train"), load_split(out, "val")])
    assert decode(ids, chars) == MODERN_BODY
    assert (meta["n_train"], meta["n_val"]) == (int(len(MODERN_BODY) * 0.75), len(MODERN_BODY) - int(len(MODERN_BODY) * 0.75))
    assert encode(MODERN_BODY, chars).tolist() == ids.tolist()
    assert meta["sources"][0]["encoding"] == "utf-8" and meta["sources"][0]["gutenberg"]["stripped"]


def test_max_chars_keeps_the_first_characters(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text("abcdefghij" * 10 + "XYZ")
    meta = prepare(DataParams(mirror=str(src), out_dir=str(tmp_path / "o"), max_chars=50))
    assert meta["n_chars"] == 50 and meta["cleaning"]["truncated_chars"] == 53
    assert load_vocab(tmp_path / "o") == list("abcdefghij")


# ----------------------------------------------------------------------------- errors
def _bad(tmp_path, name: str, content: bytes | None):
    p = tmp_path / name
    if content is not None:
        p.write_bytes(content)
    return p


GOOD = "Hello world.\n" * 20
ERROR_CASES = {
    "missing": ("nope.txt", None, r"nope\.txt: no such file.*data\.mirror"),
    "empty": ("empty.txt", b"", r"empty\.txt: file is empty"),
    "truncated_gzip": ("t.txt.gz", gzip.compress(GOOD.encode())[:-12], r"t\.txt\.gz: truncated gzip"),
    "bad_gzip": ("b.txt.gz", b"\x1f\x8bnot gzip at all", r"b\.txt\.gz: not a valid gzip file"),
    "non_utf8": ("latin.txt", b"caf\xe9 au lait\n", r"latin\.txt: not valid UTF-8 at byte offset 3 \(bytes e9"),
    "blank_after_cleaning": ("blank.txt", b"\x00\x01\r\n \t\r\n", r"blank\.txt: no text left after cleaning"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_bad_mirror_is_one_line_error_and_no_output(tmp_path, case):
    name, content, pattern = ERROR_CASES[case]
    src = _bad(tmp_path, name, content)
    out = tmp_path / "out"
    with pytest.raises(DataError, match=pattern) as info:
        prepare(DataParams(mirror=str(src), out_dir=str(out)))
    assert "\n" not in str(info.value)
    assert not out.exists() and leftovers(tmp_path) == []


def test_mirror_that_is_a_directory(tmp_path):
    with pytest.raises(DataError, match=r"is a directory, not a file"):
        prepare(DataParams(mirror=str(tmp_path), out_dir=str(tmp_path / "out")))
    assert not (tmp_path / "out").exists()


def test_non_utf8_in_gzip_names_decompressed_offset(tmp_path):
    src = _bad(tmp_path, "x.txt.gz", gzip.compress(b"abc\n\xff\xfe"))
    with pytest.raises(DataError, match=r"x\.txt\.gz: not valid UTF-8 at byte offset 4 of the decompressed"):
        prepare(DataParams(mirror=str(src), out_dir=str(tmp_path / "out")))


def test_sha256_mismatch_shows_expected_and_got(tmp_path):
    src = _bad(tmp_path, "g.txt", GOOD.encode())
    got = hashlib.sha256(GOOD.encode()).hexdigest()
    with pytest.raises(DataError, match=rf"g\.txt: sha256 mismatch: expected {'0' * 64}, got {got}"):
        prepare(DataParams(mirror=str(src), sha256="0" * 64, out_dir=str(tmp_path / "out")))
    assert not (tmp_path / "out").exists()
    meta = prepare(DataParams(mirror=str(src), sha256=got.upper(), out_dir=str(tmp_path / "out")))
    assert meta["sha256_checked"]


def test_failed_rerun_keeps_previous_output(tmp_path):
    good = _bad(tmp_path, "g.txt", GOOD.encode())
    out = tmp_path / "out"
    meta = prepare(DataParams(mirror=str(good), out_dir=str(out)))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = _bad(tmp_path, "bad.txt", b"\xff\xff")
    with pytest.raises(DataError):
        prepare(DataParams(mirror=str(bad), out_dir=str(out)))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert load_meta(out) == meta and leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- downloads
class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    hits: collections.Counter = collections.Counter()

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.hits[self.path] += 1
        body = self.files.get(self.path.removeprefix("/truncated"))
        if body is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        short = self.path.startswith("/truncated")
        self.send_header("Content-Length", str(len(body) + (100 if short else 0)))
        self.end_headers()
        self.wfile.write(body)  # a truncated response: fewer bytes than announced, then close

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(fetch, "BACKOFF_S", 0.0)
    monkeypatch.setattr(fetch, "RETRIES", 1)
    book2 = MODERN.replace("best", "worst").encode()
    _Handler.files = {"/pg1.txt": MODERN.encode(), "/pg2.txt.gz": gzip.compress(book2)}
    _Handler.hits = collections.Counter()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_download_two_urls(server, tmp_path):
    urls = (f"{server}/pg1.txt", f"{server}/pg2.txt.gz")
    stored = [_Handler.files["/pg1.txt"], _Handler.files["/pg2.txt.gz"]]
    out = tmp_path / "out"
    meta = prepare(DataParams(urls=urls, out_dir=str(out), clean="gutenberg"))
    assert meta["source_kind"] == "download" and meta["urls"] == list(urls) and meta["mirror"] is None
    assert [s["source"] for s in meta["sources"]] == list(urls)
    assert [s["stored_sha256"] for s in meta["sources"]] == [hashlib.sha256(b).hexdigest() for b in stored]
    assert meta["raw_sha256"] == hashlib.sha256(b"".join(stored)).hexdigest()
    second = MODERN_BODY.replace("best", "worst")
    expected = MODERN_BODY.strip("\n") + "\n\n\n" + second.strip("\n") + "\n"
    ids = np.concatenate([load_split(out, "train"), load_split(out, "val")])
    assert decode(ids, load_vocab(out)) == expected
    assert _Handler.hits["/pg1.txt"] == 1
    assert not meta["sha256_checked"]  # recorded on the first fetch, not pinned by the user
    # every URL pinned in its entry: checked against the pins
    pins = tuple(UrlSource(u, hashlib.sha256(b).hexdigest().upper()) for u, b in zip(urls, stored))
    meta = prepare(DataParams(urls=pins, out_dir=str(out), clean="gutenberg"))
    assert meta["sha256_checked"] and meta["sha256_expected"] == [pin.sha256 for pin in pins]


def test_truncated_download_is_rejected_after_retries(server, tmp_path):
    url = f"{server}/truncated/pg1.txt"
    n = len(_Handler.files["/pg1.txt"])
    with pytest.raises(DataError, match=rf"{url}: download failed after 2 attempts: incomplete body: got {n} of {n + 100}"):
        prepare(DataParams(urls=(url,), out_dir=str(tmp_path / "out")))
    assert _Handler.hits["/truncated/pg1.txt"] == 2
    assert not (tmp_path / "out").exists()


def test_http_404_fails_at_once(server, tmp_path):
    url = f"{server}/missing.txt"
    with pytest.raises(DataError, match=rf"{url}: download failed: HTTP 404"):
        prepare(DataParams(urls=(f"{server}/pg1.txt", url), out_dir=str(tmp_path / "out")))
    assert _Handler.hits["/missing.txt"] == 1
    assert not (tmp_path / "out").exists()


def test_unreachable_server_names_url_and_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "BACKOFF_S", 0.0)
    with pytest.raises(DataError, match=r"http://127\.0\.0\.1:9/x\.txt: download failed after 1 attempt: .*refused"):
        fetch.download("http://127.0.0.1:9/x.txt", retries=0, timeout=5)


# ----------------------------------------------------------------------------- the CLI
def _params_file(tmp_path: Path, mirror: str, out: Path) -> Path:
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["data"]["out_dir"] = str(out)
    doc["data"]["mirror"] = mirror
    for overrides in (doc.get("scales") or {}).values():
        if overrides and "data" in overrides:
            overrides["data"].pop("mirror", None)
            overrides["data"].pop("out_dir", None)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@needs_mirror
def test_cli_prepare_micro(tmp_path, capsys):
    out = tmp_path / "data" / "dickens"
    params = _params_file(tmp_path, str(MIRROR), out)
    assert cli.main(["prepare", "--params", str(params), "--scale", "micro"]) == 0
    printed = capsys.readouterr().out
    assert "vocab " in printed and "train 180,000" in printed and "sha256" in printed
    meta = load_meta(out)
    assert meta["scale"] == "micro" and meta["n_chars"] == 200_000
    assert (meta["n_train"], meta["n_val"]) == (180_000, 20_000)
    assert meta["vocab_size"] == len(load_vocab(out))
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train.npy", "val.npy", "vocab.json"]


def test_cli_errors_exit_2_with_one_line(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    params = _params_file(tmp_path, str(tmp_path / "missing.txt.gz"), out)
    assert cli.main(["prepare", "--params", str(params), "--scale", "micro"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernattn prepare: error: ") and err.count("\n") == 1
    assert "missing.txt.gz: no such file" in err and f"data.mirror in {params}" in err
    assert not out.exists()
    # a params problem (the loader's ParamsError) is the same one-line exit 2
    assert cli.main(["prepare", "--params", str(params), "--scale", "huge"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernattn prepare: error: ") and "unknown scale 'huge'" in err
