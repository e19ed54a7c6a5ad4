"""Data stage: any text corpus as character ids (train.npy, val.npy, vocab.json, meta.json).

    kernattn prepare [--params params.yaml] [--scale tiny]

`data.corpus` is the corpus's name (outputs in data.out_dir, by default
results/<scale>/data/<corpus>). Source: `data.mirror` (a local .txt or .txt.gz, a relative
path is relative to the current folder) when set; else `data.dataset`, a data set of the
catalogue (its files found in the data mirror folder or the cache, else downloaded and verified:
kernattn.datasets), concatenated in order; else every URL of `data.urls` downloaded and
concatenated in order. Each download is verified before use
against its pinned sha256 (an entry `{url: ..., sha256: ...}`) or, unpinned, against the
sha256 recorded in <out_dir>.downloads/SHA256SUMS on its first fetch, and cached there (see
fetch.fetch_verified). `data.sha256`, when set, must equal the sha256 of the mirror file as
stored (or of its decompressed content).

Cleaning, in this order (every step is counted in meta.json under "cleaning"):
1. decode: strict UTF-8 (an invalid byte is an error naming the file and byte offset), except
   for files in KNOWN_SOURCES, pinned by the sha256 of their content: the Silesia `dickens`
   file (the catalogue's silesia-dickens) is CP437, as its 8 accented letters show.
2. newlines: CRLF and lone CR -> LF (U+2028/U+2029 too).
3. `data.clean: gutenberg` only: Project Gutenberg boilerplate. The text between "*** START OF
   THE PROJECT GUTENBERG EBOOK" and "*** END OF ..." lines is kept; for older files, between
   the "*END*THE SMALL PRINT" line and the "End of the Project Gutenberg Etext" line (every
   work of a concatenation). A source with neither kind of marker is an error: stripping was
   asked for, so a missing marker means the wrong file or a changed marker format, and
   training on a licence text silently would be worse than stopping. Not applied to the
   Silesia file: its 14 works keep their headers and licence text, as in the Silesia corpus;
   stripping them would leave 86 symbols, not the 93 of gpa-short/gpa-long (# $ % + < = _ only
   occur in the licence text). `data.clean: none` keeps the whole text.
4. characters: TAB -> space; control (except LF), format (e.g. a BOM), private-use, surrogate
   and unassigned characters are removed; with `data.fold_accents` a Latin letter with
   diacritics -> its ASCII letter (NFD, marks dropped: "Ch\u00e2lons" -> "Chalons"). Every
   other character is kept: the vocabulary is whatever the text holds (at most 256 symbols).
On the Silesia file (fold_accents: true) this changes 200,783 CRLF, 1 TAB, 8 accented letters
and drops the final 0x1A (DOS end of file): 9,991,662 characters over 93 symbols (LF + 92
printable ASCII).

Then `data.max_chars` keeps the first max_chars characters; the vocabulary is the sorted set of
characters of that whole text; the first int(n * (1 - val_fraction)) ids are train, the rest
val. Outputs in `data.out_dir`, written as one folder atomically (complete or absent; a failed
rerun leaves the previous output in place):
    train.npy, val.npy   1-D uint8 token ids (np.save; id i is vocab.json chars[i])
    vocab.json           {"chars": [...], "size": N}
    meta.json            corpus, source, sha256s, sizes, cleaning counts, timestamp
Read them with kernattn.tracks.char.data.load_split / load_vocab / decode.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import time
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ...config import DataParams, ParamsError, params_from_args
from ...datasets import Where, dataset, locate
from ...io import atomic_dir, atomic_write_json
from .data import VOCAB_FILE, META_FILE, SPLIT_FILES
from ...fetch import DataError, Source, decode_utf8, fetch_verified, read_local, sha256_bytes



@dataclass(frozen=True)
class KnownSource:
    name: str
    encoding: str
    strip_gutenberg: bool
    note: str


# Files whose encoding and handling are known, by the sha256 of their (decompressed) content.
KNOWN_SOURCES: dict[str, KnownSource] = {
    "b24c37886142e11d0ee687db6ab06f936207aa7f2ea1fd1d9a36763c7a507e6a": KnownSource(
        name="silesia/dickens",
        encoding="cp437",
        strip_gutenberg=False,
        note=("Silesia corpus file `dickens` (10,192,446 bytes, CP437, CRLF): 14 works with their "
              "Gutenberg headers and licence text kept as in the corpus; stripping them would "
              "leave 86 symbols instead of the 93 of gpa-short/gpa-long"),
    ),
}

# --------------------------------------------------------------------------- Gutenberg
_MODERN_START = re.compile(r"^\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG E-?(?:BOOK|TEXT)\b.*$", re.I | re.M)
_MODERN_END = re.compile(r"^\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG E-?(?:BOOK|TEXT)\b.*$", re.I | re.M)
_OLD_START = re.compile(r"^\*END\*?\s*THE SMALL PRINT\b.*$", re.I | re.M)  # last line of an old header
_OLD_END = re.compile(r"^[ \t]*End of (?:the )?Project Gutenberg'?s?[ \t]+E-?(?:text|book)\b.*$", re.I | re.M)


def find_gutenberg(text: str) -> tuple[str | None, list[tuple[int, int]]]:
    """The style of Gutenberg markers found ("modern", "old" or None) and the body spans.

    A body starts after a header-end line (modern "*** START OF ...", old "*END*THE SMALL
    PRINT ...") and stops at the footer line: modern, the first "*** END OF ..." after it;
    old, the last "End of the Project Gutenberg Etext ..." before the next header (so text
    after a repeated end line, like Dombey and Son's prefaces, is kept). With no footer the
    body runs on to the next header, or to the end. Text before the first header (when a
    footer comes first, that text is a body) and after the last footer is boilerplate.
    """
    for style, start_re, end_re, last in (("modern", _MODERN_START, _MODERN_END, False),
                                          ("old", _OLD_START, _OLD_END, True)):
        starts = list(start_re.finditer(text))
        ends = [m.start() for m in end_re.finditer(text)]
        if not starts and not ends:
            continue
        spans = []
        first = starts[0].start() if starts else len(text)
        lead = [e for e in ends if e < first]
        if lead:
            spans.append((0, lead[-1] if last else lead[0]))
        for i, m in enumerate(starts):
            nxt = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            begin = m.end() + 1 if text.startswith("\n", m.end()) else m.end()
            inside = [e for e in ends if begin <= e < nxt]
            spans.append((begin, (inside[-1] if last else inside[0]) if inside else nxt))
        return style, spans
    return None, []


def strip_gutenberg(text: str) -> tuple[str, dict]:
    """Keep only the bodies (see find_gutenberg); returns (text, stats)."""
    style, spans = find_gutenberg(text)
    if style is None:
        return text, {"style": None, "works": 0, "chars_removed": 0}
    out = "".join(text[a:b] for a, b in spans)
    return out, {"style": style, "works": len(spans), "chars_removed": len(text) - len(out)}


# --------------------------------------------------------------------------- characters
_REMOVED_CATEGORIES = {"Cc": "control", "Cf": "format", "Co": "private_use", "Cs": "surrogate",
                       "Cn": "unassigned"}


def normalize_newlines(text: str) -> tuple[str, dict]:
    crlf = text.count("\r\n")
    text = text.replace("\r\n", "\n")
    cr = text.count("\r")
    text = text.replace("\r", "\n")
    seps = text.count("\u2028") + text.count("\u2029")
    if seps:
        text = text.replace("\u2028", "\n").replace("\u2029", "\n")
    return text, {"crlf_to_lf": crlf, "cr_to_lf": cr, "unicode_separators_to_lf": seps}


def _fold(ch: str) -> str | None:
    """'\u00e2' -> 'a': a letter whose canonical decomposition is an ASCII letter plus marks."""
    d = unicodedata.normalize("NFD", ch)
    if len(d) > 1 and d[0].isascii() and d[0].isalpha() and all(unicodedata.category(c) == "Mn" for c in d[1:]):
        return d[0]
    return None


def clean_characters(text: str, fold_accents: bool = True) -> tuple[str, dict]:
    """TAB -> space, non-printable characters removed and, with fold_accents (the Dickens
    stage's choice, gpa-short/gpa-long; prepare passes data.fold_accents), accented Latin letters
    -> ASCII.

    Only the distinct characters outside printable ASCII are looked at, each replaced with one
    str.replace, so a 10 MB text takes well under a second. Returns (text, stats).
    """
    tabs = 0
    folded: dict[str, int] = {}
    removed: dict[str, dict[str, int]] = {}
    for ch in sorted(c for c in set(text) if c != "\n" and not (" " <= c <= "~")):
        n = text.count(ch)
        if ch == "\t":
            tabs, repl = n, " "
        elif (cat := unicodedata.category(ch)) in _REMOVED_CATEGORIES:
            removed.setdefault(_REMOVED_CATEGORIES[cat], {})[f"U+{ord(ch):04X}"] = n
            repl = ""
        elif fold_accents and (base := _fold(ch)) is not None:
            folded[f"{ch}->{base}"] = n
            repl = base
        else:
            continue  # a printable non-ASCII character (e.g. a curly quote): kept
        text = text.replace(ch, repl)
    stats = {
        "tab_to_space": tabs,
        "accents_folded": folded,
        "accents_folded_total": sum(folded.values()),
        "removed": removed,
        "removed_total": sum(n for per in removed.values() for n in per.values()),
    }
    return text, stats


# --------------------------------------------------------------------------- vocabulary
def build_vocab(text: str) -> tuple[list[str], np.ndarray]:
    """Sorted distinct characters, and the text as uint8 ids into them."""
    cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    counts = np.bincount(cps)
    present = np.flatnonzero(counts)
    if len(present) > 256:
        raise DataError(f"{len(present)} distinct characters after cleaning; uint8 token ids allow at most 256")
    lut = np.zeros(len(counts), dtype=np.uint8)
    lut[present] = np.arange(len(present), dtype=np.uint8)
    return [chr(c) for c in present], lut[cps]


# --------------------------------------------------------------------------- the stage
def _mirror_hint(data: DataParams, params_path: str, scale: str | None) -> str:
    where = f"data.mirror in {params_path}" + (f" (scale {scale})" if scale else "")
    return (f"; fix {where} to point to the {data.corpus} text (.txt or .txt.gz), "
            f"or set data.mirror to null to read data.dataset or data.urls")


def _read_sources(data: DataParams, params_path: str, scale: str | None, where: Where | None) -> list[Source]:
    if data.mirror:
        return [read_local(data.mirror, hint=_mirror_hint(data, params_path, scale))]
    if data.dataset and not data.urls:
        where = where or Where.from_params()
        files = dataset(data.dataset, f"data.dataset in {params_path}").files
        return [dataclasses.replace(read_local(locate(f, where)), kind="catalogue") for f in files]
    if not data.urls:
        raise DataError(f"{params_path}: no data source: set data.dataset (a catalogue data set), "
                        f"data.mirror (a local file) or data.urls")
    if data.sha256:
        raise DataError(f"{params_path}: data.sha256 pins the local file data.mirror, which is not set; "
                        f"pin a download in its data.urls entry instead: {{url: ..., sha256: ...}}")
    return [fetch_verified(u.url, downloads_dir(data), sha256=u.sha256, pin_key=f"data.urls[{i}].sha256 in {params_path}")
            for i, u in enumerate(data.urls)]


def downloads_dir(data: DataParams) -> Path:
    """Where data.urls are cached with their SHA256SUMS: beside data.out_dir, as
    <out_dir>.downloads (kept when out_dir is replaced; deleting it re-records the sums)."""
    out = Path(data.out_dir)
    return out.with_name(out.name + ".downloads")


def _check_sha256(data: DataParams, sources: list[Source]) -> bool:
    """data.sha256 against the mirror file (as stored, or its decompressed content); downloads
    were checked one by one as they were fetched."""
    if sources[0].kind == "catalogue":
        return True  # every file verified against the catalogue's sha256 as it was located
    if not data.sha256 or sources[0].kind != "mirror":
        return all(u.sha256 for u in data.urls) if sources[0].kind == "download" else False
    expected = data.sha256.strip().lower()
    src = sources[0]
    if expected not in (src.stored_sha256, src.content_sha256):
        raise DataError(f"{src.source}: sha256 mismatch: expected {expected}, got {src.stored_sha256} (file as stored); "
                        f"replace the file, or update data.sha256 if this file is the intended one")
    return True


def _gutenberg(text: str, src: Source, known: KnownSource | None, clean: str) -> tuple[str, dict]:
    """data.clean applied to one source's text: (text, the record for meta.json)."""
    if clean == "gutenberg" and (known is None or known.strip_gutenberg):
        text, gut = strip_gutenberg(text)
        if gut["style"] is None:
            raise DataError(f"{src.source}: data.clean is 'gutenberg' but the text has no Project Gutenberg "
                            f"START/END markers; set data.clean: none for a text that is not from Gutenberg, "
                            f"or check that this is the intended file")
        return text, {"stripped": True, **gut}
    style, spans = find_gutenberg(text)
    reason = known.note if known is not None and clean == "gutenberg" else f"data.clean: {clean}"
    return text, {"stripped": False, "style": style, "works": len(spans), "chars_removed": 0, "reason": reason}


def _clean_text(data: DataParams, sources: list[Source]) -> tuple[str, list[dict], dict]:
    """Decode, normalise newlines, strip boilerplate (data.clean) per source; concatenate;
    clean the characters. Returns (text, per-source records, cleaning stats)."""
    newline_stats = {"crlf_to_lf": 0, "cr_to_lf": 0, "unicode_separators_to_lf": 0}
    parts, records = [], []
    for src in sources:
        known = KNOWN_SOURCES.get(src.content_sha256)
        if known is None:
            text, encoding = decode_utf8(src.data, src.source, src.compressed), "utf-8"
        else:
            text, encoding = src.data.decode(known.encoding), known.encoding
        text, nl = normalize_newlines(text)
        for k, v in nl.items():
            newline_stats[k] += v
        text, gut = _gutenberg(text, src, known, data.clean)
        parts.append(text)
        records.append({**src.describe(), "encoding": encoding,
                        "known_as": known.name if known else None, "gutenberg": gut})
    if len(parts) == 1:
        text = parts[0]
    else:  # one blank-line gap between works
        text = "\n\n\n".join(p.strip("\n") for p in parts) + "\n"
    text, char_stats = clean_characters(text, fold_accents=data.fold_accents)
    return text, records, {**newline_stats, **char_stats, "fold_accents": data.fold_accents}


def _split(text: str, data: DataParams, name: str, n_clean: int) -> tuple[int, list[str], np.ndarray]:
    """(n_train, vocabulary, ids) of the cleaned, truncated text; DataError when unusable."""
    if not text.strip():
        raise DataError(f"{name}: no text left after cleaning ({n_clean} characters, all blank or removed); "
                        f"check that the file is the corpus")
    n = len(text)
    n_train = int(n * (1 - data.val_fraction))
    if n_train < 1 or n - n_train < 1:
        raise DataError(f"{name}: only {n} characters after cleaning: too few for a train/val split "
                        f"with val_fraction={data.val_fraction}; use a larger corpus or max_chars")
    try:
        chars, ids = build_vocab(text)
    except DataError as exc:
        raise DataError(f"{name}: {exc}") from None
    return n_train, chars, ids


def prepare(data: DataParams, *, params_path: str = "params.yaml", scale: str | None = None,
            where: Where | None = None) -> dict:
    """Run the stage for `data`; returns meta (also written to out_dir/meta.json).

    Raises DataError (one line) on bad input; nothing is written then.
    """
    t0 = time.perf_counter()
    sources = _read_sources(data, params_path, scale, where)
    raw_sha256 = (sources[0].stored_sha256 if len(sources) == 1
                  else sha256_bytes(b"".join(s.stored for s in sources)))
    sha_checked = _check_sha256(data, sources)
    text, records, cleaning = _clean_text(data, sources)
    n_clean = len(text)
    if data.max_chars is not None:
        text = text[: data.max_chars]
    name = sources[0].source if len(sources) == 1 else "data.urls"
    n_train, chars, ids = _split(text, data, name, n_clean)
    n = len(text)

    kind = sources[0].kind
    meta = {
        "corpus": data.corpus,
        "source_kind": kind,
        "mirror": data.mirror if kind == "mirror" else None,
        "mirror_resolved": str(Path(data.mirror).expanduser().resolve()) if kind == "mirror" else None,
        "dataset": data.dataset if kind == "catalogue" else None,
        "urls": [u.url for u in data.urls] if kind == "download" else [],
        "sources": records,
        "raw_sha256": raw_sha256,
        "sha256_expected": (data.sha256 if kind == "mirror" else [u.sha256 for u in data.urls]),
        "sha256_checked": sha_checked,
        "cleaning": {"clean": data.clean, **cleaning, "chars_after_cleaning": n_clean,
                     "max_chars": data.max_chars, "truncated_chars": n_clean - n},
        "n_chars": n,
        "n_train": n_train,
        "n_val": n - n_train,
        "val_fraction": data.val_fraction,
        "vocab_size": len(chars),
        "newlines": text.count("\n"),
        "cleaned_sha256": sha256_bytes(text.encode("utf-8")),
        "dtype": "uint8",
        "files": {"train": SPLIT_FILES["train"], "val": SPLIT_FILES["val"], "vocab": VOCAB_FILE},
        "params": params_path,
        "scale": scale,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    with atomic_dir(data.out_dir) as tmp:
        np.save(tmp / SPLIT_FILES["train"], ids[:n_train], allow_pickle=False)
        np.save(tmp / SPLIT_FILES["val"], ids[n_train:], allow_pickle=False)
        atomic_write_json(tmp / VOCAB_FILE, {"chars": chars, "size": len(chars)})
        meta["seconds"] = round(time.perf_counter() - t0, 3)
        atomic_write_json(tmp / META_FILE, meta)
    return meta


def run(args: argparse.Namespace) -> int:
    from ...errors import UsageError

    try:
        params = params_from_args(args)
        meta = prepare(params.data, params_path=params.path, scale=params.scale, where=Where.from_params(params))
    except (ParamsError, DataError) as exc:
        raise UsageError(str(exc)) from None
    rec = meta["sources"]
    where = {"mirror": meta["mirror"], "catalogue": f"data set {meta['dataset']}"}.get(meta["source_kind"],
                                                                                     f"{len(rec)} URLs")
    cl = meta["cleaning"]
    print(f"prepared corpus {meta['corpus']!r} in {params.data.out_dir} from {where} ({meta['seconds']:.1f} s)")
    print(f"  chars {meta['n_chars']:,}  vocab {meta['vocab_size']}  "
          f"train {meta['n_train']:,}  val {meta['n_val']:,}  newlines {meta['newlines']:,}")
    print(f"  cleaning: {cl['crlf_to_lf'] + cl['cr_to_lf']:,} CR/CRLF -> LF, {cl['tab_to_space']} tab -> space, "
          f"{cl['accents_folded_total']} accents folded, {cl['removed_total']} removed, "
          f"{cl['truncated_chars']:,} cut by max_chars")
    print(f"  sha256 raw {meta['raw_sha256']}{' (checked)' if meta['sha256_checked'] else ''}")
    print(f"  sha256 cleaned {meta['cleaned_sha256']}")
    return 0
