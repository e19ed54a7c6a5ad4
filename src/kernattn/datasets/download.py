"""Downloads into the data cache: pooch, with a resumable HTTP downloader of our own.

pooch (fatiando/pooch) does what every download needs and we would otherwise keep by hand: the
file is streamed to a temporary name in the cache folder, its sha256 checked against the known
hash, and only then moved to its name. Its own HTTPDownloader cannot resume, so `Resumable`
takes its place: the body goes to `<name>.part`, which a later try continues with an HTTP Range
request; only a complete body (Content-Length, or the total of a Content-Range) is handed to
pooch for the check. A killed or failed download thus leaves at most a `.part` file, never one
under the file's own name.

Transient failures (no connection, a connection lost mid-file, HTTP 5xx, 408, 429) are retried
RETRIES times, waiting BACKOFF_S, 2*BACKOFF_S, ... (env KERNATTN_DOWNLOAD_RETRIES and
KERNATTN_DOWNLOAD_BACKOFF_S override both); other HTTP errors end at once. Every failure is a
`Failed` naming the URL and the reason, which kernattn.datasets.locate turns into one line.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

USER_AGENT = "kernattn (research data sets; pooch)"
TIMEOUT_S = 60.0
CHUNK = 1 << 20


class Failed(Exception):
    """A download that did not give the expected bytes; `transient`: worth a later try."""

    def __init__(self, reason: str, transient: bool = False):
        super().__init__(reason)
        self.transient = transient


def _retries() -> tuple[int, float]:
    return (int(os.environ.get("KERNATTN_DOWNLOAD_RETRIES", "3")),
            float(os.environ.get("KERNATTN_DOWNLOAD_BACKOFF_S", "2.0")))


class Resumable:
    """A pooch downloader: `downloader(url, output_file, pooch)` fills output_file completely,
    resuming from `part` (kept between calls and processes), and records the sha256 it saw."""

    def __init__(self, part: Path, progress: bool = True):
        self.part = part
        self.progress = progress
        self.sha256: str | None = None

    def __call__(self, url: str, output_file, pooch=None, check_only: bool = False) -> None:  # noqa: ARG002
        retries, backoff = _retries()
        reason = "unknown"
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(backoff * 2 ** (attempt - 1))
            try:
                self._once(url)
            except Failed as exc:
                if not exc.transient:
                    raise
                reason = str(exc)
                continue
            self.sha256 = _sha256(self.part)
            os.replace(self.part, output_file)
            return
        raise Failed(f"failed after {retries + 1} attempt{'s' if retries else ''}: {reason}", transient=True)

    def _once(self, url: str) -> None:
        import requests

        have = self.part.stat().st_size if self.part.is_file() else 0
        headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={have}-"} if have else {})}
        try:
            resp = requests.get(url, headers=headers, stream=True, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            raise Failed(f"cannot connect ({_root_cause(exc)})", transient=True) from None
        with resp:
            if resp.status_code == 416 and have:  # nothing past what we hold: start over
                self.part.unlink()
                raise Failed("the partial file was longer than the server's; restarting", transient=True)
            if resp.status_code >= 400:
                transient = resp.status_code >= 500 or resp.status_code in (408, 429)
                raise Failed(f"HTTP {resp.status_code} {resp.reason}", transient=transient)
            resumed = resp.status_code == 206
            total = _total(resp, have if resumed else 0)
            self._write(resp, resumed, total, url)

    def _write(self, resp, resumed: bool, total: int | None, url: str) -> None:
        import requests

        self.part.parent.mkdir(parents=True, exist_ok=True)
        bar = _bar(url, total, self.part.stat().st_size if resumed else 0) if self.progress else None
        try:
            with open(self.part, "ab" if resumed else "wb") as fh:
                for chunk in resp.iter_content(CHUNK):
                    fh.write(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
        except (requests.RequestException, OSError) as exc:
            raise Failed(f"connection lost after {self.part.stat().st_size} bytes ({_short(exc)})",
                         transient=True) from None
        finally:
            if bar is not None:
                bar.close()
        got = self.part.stat().st_size
        if total is not None and got != total:
            raise Failed(f"incomplete body: {got} of {total} bytes", transient=True)


def _total(resp, offset: int) -> int | None:
    """The whole file's length: Content-Range's total on a 206, else offset + Content-Length."""
    crange = resp.headers.get("Content-Range", "")
    if "/" in crange and crange.rsplit("/", 1)[1].isdigit():
        return int(crange.rsplit("/", 1)[1])
    length = resp.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _bar(url: str, total: int | None, initial: int):
    if not sys.stderr.isatty():
        print(f"downloading {url}" + (f" ({total / 1e6:.1f} MB)" if total else ""), file=sys.stderr, flush=True)
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, leave=False,
                desc=url.rsplit("/", 1)[-1][:30], file=sys.stderr)


def _root_cause(exc: BaseException) -> str:
    """The innermost exception's type and first words: "NameResolutionError ..." rather than
    urllib3's whole chain (the URL is named beside it already)."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    text = _short(exc).split(": ")[-1][:80]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(url: str, dest: Path, sha256: str | None, progress: bool = True) -> None:
    """`url`'s complete body at `dest`, checked against `sha256` when given (pooch). Raises
    Failed; `dest` then does not exist."""
    import pooch

    pooch.get_logger().setLevel("WARNING")
    downloader = Resumable(dest.with_name(dest.name + ".part"), progress)
    try:
        pooch.retrieve(url, known_hash=f"sha256:{sha256}" if sha256 else None, fname=dest.name,
                       path=dest.parent, downloader=downloader, progressbar=False)
    except ValueError as exc:  # pooch: the hash did not match (the temporary file is gone)
        if downloader.sha256 and sha256 and downloader.sha256 != sha256:
            raise Failed(f"sha256 mismatch: expected {sha256}, got {downloader.sha256}") from None
        raise Failed(_short(exc)) from None
