"""Getting raw corpus bytes: a local mirror file or an HTTP(S) download, with sha256s.

    src = read_local("corpus/dickens.txt.gz")   # any .txt / .txt.gz
    src = download("https://www.gutenberg.org/cache/epub/98/pg98.txt")
    src.data             # the content (gunzipped when the file is gzip)
    src.stored_sha256    # sha256 of the bytes as stored / as served
    src.content_sha256   # sha256 of src.data
    text = decode_utf8(src.data, src.source)

Generic (nothing corpus-specific): the char corpus stage and the LM and vision data use it. Every problem raises
`DataError` (a ValueError) with a one-line message naming the file or URL and the fix.

Downloads for a pipeline stage go through fetch_verified(url, cache_dir, sha256=pin): every URL
gets a sha256, pinned by the user or recorded on its first fetch in cache_dir/SHA256SUMS (the
`sha256sum` format, so `sha256sum -c SHA256SUMS` in that folder re-checks the cache), and the
bytes are verified against it BEFORE use: a download is written under a temporary name in
cache_dir and renamed to its cache name only once it is complete (Content-Length), decodes
(gzip) and matches the sha256. A later run uses the cached copy when it still matches, else
downloads again; a server now serving other bytes is an error that names the URL, the two
hashes and the file to edit; nothing else is written then.

Gzip is recognised by its magic bytes (1f 8b) or a ".gz" name; a truncated or corrupt gzip
is an error, never a silently short text. Downloads go to a temporary file, are checked
against Content-Length when the server sends one, and are retried (RETRIES times, waiting
BACKOFF_S, 2*BACKOFF_S, ... between tries) on network errors, timeouts, short bodies, 5xx,
408 and 429; other HTTP errors (404, 403, ...) fail at once.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DataError", "Source", "read_local", "download", "fetch_verified", "cache_name", "read_sums",
           "SUMS_FILE", "decode_utf8", "sha256_bytes",
           "USER_AGENT", "TIMEOUT_S", "RETRIES", "BACKOFF_S"]

USER_AGENT = "kernattn/0.1 (research corpus preparation; python-urllib)"
TIMEOUT_S = 60.0  # per socket operation (connect, each read)
RETRIES = 3  # extra attempts after the first
BACKOFF_S = 2.0  # wait before retry k (k = 1, 2, ...): BACKOFF_S * 2**(k-1)
CHUNK = 1 << 20

GZIP_MAGIC = b"\x1f\x8b"
SUMS_FILE = "SHA256SUMS"


class DataError(ValueError):
    """Unusable input data; the message is one line naming the file or URL and the fix."""


@dataclass(frozen=True)
class Source:
    """Raw bytes of one input, with where they came from and their hashes."""

    kind: str  # "mirror" or "download"
    source: str  # the path as given, or the URL
    stored_bytes: int
    stored_sha256: str
    compressed: bool
    data: bytes = field(repr=False)  # the content (gunzipped if it was gzip)
    content_sha256: str = ""
    stored: bytes = field(default=b"", repr=False)  # the bytes as stored / served

    def describe(self) -> dict:
        """JSON-ready record (everything but the data)."""
        return {
            "kind": self.kind,
            "source": self.source,
            "stored_bytes": self.stored_bytes,
            "stored_sha256": self.stored_sha256,
            "compressed": self.compressed,
            "content_bytes": len(self.data),
            "content_sha256": self.content_sha256,
        }


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _gunzip_if_needed(stored: bytes, name: str) -> tuple[bytes, bool]:
    looks_gz = stored[:2] == GZIP_MAGIC or name.lower().split("?")[0].endswith(".gz")
    if not looks_gz:
        return stored, False
    try:
        return gzip.decompress(stored), True
    except EOFError:
        raise DataError(f"{name}: truncated gzip file (ends before the end-of-stream marker); "
                        f"copy or download it again") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise DataError(f"{name}: not a valid gzip file ({exc}); copy or download it again, "
                        f"or give the uncompressed .txt") from None


def _make_source(kind: str, name: str, stored: bytes) -> Source:
    if not stored:
        raise DataError(f"{name}: file is empty (0 bytes); copy or download it again")
    data, compressed = _gunzip_if_needed(stored, name)
    if not data:
        raise DataError(f"{name}: decompresses to nothing (0 bytes); copy or download it again")
    return Source(kind, name, len(stored), sha256_bytes(stored), compressed, data, sha256_bytes(data), stored)


def read_local(path: str | os.PathLike, hint: str = "") -> Source:
    """Read a local file (plain or gzip). `hint` is appended to the missing-file message
    (e.g. which parameter to change). A relative path is relative to the current folder."""
    name = str(path)
    p = Path(path).expanduser()
    if p.is_dir():
        raise DataError(f"{name}: is a directory, not a file; point it to the corpus file itself{hint}")
    if not p.exists():
        where = "" if p.is_absolute() else f" (relative to {Path.cwd()})"
        raise DataError(f"{name}: no such file{where}{hint}")
    try:
        stored = p.read_bytes()
    except OSError as exc:
        raise DataError(f"{name}: cannot read ({exc.strerror or exc}){hint}") from None
    return _make_source("mirror", name, stored)


class _Retry(Exception):
    """A transient failure: worth another attempt."""


def _fetch_once(url: str, dest: Path, timeout: float, progress: bool) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (http/https URLs from params)
    except urllib.error.HTTPError as exc:
        reason = f"HTTP {exc.code} {exc.reason}"
        if exc.code >= 500 or exc.code in (408, 429):
            raise _Retry(reason) from None
        raise DataError(f"{url}: download failed: {reason}; check the URL in data.urls, "
                        f"or set data.mirror to a local copy") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise _Retry(str(getattr(exc, "reason", None) or exc)) from None
    with resp:
        length = resp.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        bar = None
        if progress and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                bar = tqdm(total=expected, unit="B", unit_scale=True, leave=False,
                           desc=url.rsplit("/", 1)[-1][:30], file=sys.stderr)
            except ImportError:  # pragma: no cover (tqdm is a dependency)
                bar = None
        got = 0
        try:
            with open(dest, "wb") as fh:
                while True:
                    try:
                        chunk = resp.read(CHUNK)
                    except (http.client.HTTPException, OSError) as exc:  # IncompleteRead, timeouts, resets
                        raise _Retry(f"connection lost after {got} bytes ({exc})") from None
                    if not chunk:
                        break
                    fh.write(chunk)
                    got += len(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
    if expected is not None and got != expected:
        raise _Retry(f"incomplete body: got {got} of {expected} bytes (Content-Length)")


def download(url: str, *, timeout: float | None = None, retries: int | None = None,
             backoff_s: float | None = None, progress: bool = True) -> Source:
    """Download `url` to a temporary file, verify it is complete, and return its bytes.

    Defaults come from the module constants TIMEOUT_S, RETRIES and BACKOFF_S (read at call
    time, so tests can shorten them). Raises DataError naming the URL and the last reason.
    """
    _check_url(url)
    with tempfile.TemporaryDirectory(prefix="kernattn-fetch-") as tmpdir:
        dest = Path(tmpdir) / "download"
        _download_into(url, dest, timeout, retries, backoff_s, progress)
        return _make_source("download", url, dest.read_bytes())


def _check_url(url: str) -> None:
    if not url.lower().startswith(("http://", "https://")):
        raise DataError(f"{url}: not an http(s) URL; data.urls takes http:// or https:// addresses "
                        f"(use data.mirror for a local file)")


def _download_into(url: str, dest: Path, timeout: float | None, retries: int | None,
                   backoff_s: float | None, progress: bool) -> None:
    """The complete body of `url` in `dest` (retried on transient failures), or DataError."""
    timeout = TIMEOUT_S if timeout is None else timeout
    retries = RETRIES if retries is None else retries
    backoff_s = BACKOFF_S if backoff_s is None else backoff_s
    reason = "unknown error"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        try:
            _fetch_once(url, dest, timeout, progress)
        except _Retry as exc:
            reason = str(exc)
            continue
        return
    tries = f"{retries + 1} attempt{'s' if retries else ''}"
    raise DataError(f"{url}: download failed after {tries}: {reason}; check the network, "
                    f"or set data.mirror (or KERNATTN_DATA_MIRROR) to a local copy")


def cache_name(url: str) -> str:
    """File name of `url` in a download cache: its last path segment, prefixed by a short hash
    of the whole URL (two URLs ending in the same name do not collide)."""
    base = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "index"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in base)[:80]
    return f"{sha256_bytes(url.encode())[:10]}-{safe}"


def read_sums(path: Path) -> dict[str, str]:
    """SHA256SUMS (`<sha256>  <file name>` per line) -> {file name: sha256}; DataError naming
    the line when it is malformed."""
    if not path.is_file():
        return {}
    sums: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        digest, _, name = line.partition("  ")
        digest = digest.strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name.strip():
            raise DataError(f"{path}: line {number} is not '<sha256>  <file name>': {line[:80]!r}; "
                            f"fix or delete that line (it is re-recorded on the next download)")
        sums[name.strip().lstrip("*")] = digest
    return sums


def _record_sum(path: Path, name: str, digest: str) -> None:
    from .io import atomic_write_text

    sums = read_sums(path) | {name: digest}
    atomic_write_text(path, "".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))


def fetch_verified(url: str, cache_dir: str | os.PathLike, *, sha256: str | None = None, pin_key: str = "",
                   timeout: float | None = None, retries: int | None = None, backoff_s: float | None = None,
                   progress: bool = True) -> Source:
    """`url`'s bytes, verified against `sha256` when the user pinned one (`pin_key` names where,
    for the error), else against its sha256 in cache_dir/SHA256SUMS (recorded there on the
    first fetch); served from cache_dir when the cached copy still matches.

    The download lands under a temporary name in cache_dir and is renamed to
    cache_dir/cache_name(url) only once complete, decodable and matching; on any error the
    temporary file is removed, the cache and SHA256SUMS are unchanged, and DataError (one line)
    names the URL and the fix."""
    from .io import atomic_path

    _check_url(url)
    cache = Path(cache_dir)
    sums_path = cache / SUMS_FILE
    name = cache_name(url)
    cached = cache / name
    recorded = read_sums(sums_path).get(name)
    pinned = sha256.strip().lower() if sha256 else None
    expected = pinned or recorded  # a pin is the user's word: it wins over an older record
    if expected is not None and cached.is_file():
        stored = cached.read_bytes()
        if sha256_bytes(stored) == expected:
            return _make_source("download", url, stored)
        # A damaged cached copy: fetch again, verified against the same recorded sha256.
    created = not cache.exists()
    try:
        with atomic_path(cached) as tmp:
            _download_into(url, tmp, timeout, retries, backoff_s, progress)
            src = _make_source("download", url, tmp.read_bytes())  # empty / bad gzip: error
            if pinned is not None and src.stored_sha256 != pinned:
                raise DataError(
                    f"{url}: sha256 mismatch: expected {pinned} (pinned in {pin_key or 'the params'}), got "
                    f"{src.stored_sha256}; the download was discarded: fix the URL, or update {pin_key or 'the pin'} "
                    f"if the server's file changed on purpose")
            if expected is not None and src.stored_sha256 != expected:
                raise DataError(
                    f"{url}: sha256 mismatch: expected {expected} (recorded in {sums_path} on its first "
                    f"download), got {src.stored_sha256}; the download was discarded: if the server's "
                    f"file changed on purpose, delete the line for {name} from {sums_path} and rerun")
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                cache.rmdir()  # only if empty: nothing is left behind by a failed first fetch
        raise
    if recorded != src.stored_sha256:  # first fetch, or a pin that replaced an older record
        _record_sum(sums_path, name, src.stored_sha256)
    return src


def decode_utf8(data: bytes, name: str, compressed: bool = False) -> str:
    """Strict UTF-8 (a leading BOM is kept as U+FEFF for the cleaner to count and drop).
    `compressed`: the offset is then said to be in the decompressed content."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 4].hex(" ")
        raise DataError(
            f"{name}: not valid UTF-8 at byte offset {exc.start}"
            f"{' of the decompressed content' if compressed else ''} (bytes {bad}: {exc.reason}); convert it to UTF-8 first, e.g. "
            f"`iconv -f cp1252 -t utf-8` (use the file's real encoding)"
        ) from None
