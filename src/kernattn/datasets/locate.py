"""Finding a catalogued file: a mirror folder, else the cache, else a verified download.

    where = Where.from_params(params)        # the mirror, the cache, the base URL, the scale
    path = locate(file, where)               # a local path to read; DataError (one line) if none

1. A mirror folder, when one is configured (KERNATTN_DATA_MIRROR, else params `datasets.mirror`):
   a read-only folder laid out as the catalogue's paths (as clusters keep data sets). A file found
   there is checked against its sha256 (as stored, else of its content) and read in place.
2. Else the cache (KERNATTN_DATA_HOME, else `datasets.home`, else the per-user cache folder,
   ~/.cache/kernattn on Linux): a file there was verified before it got its name.
3. Else a download into the cache, from each of the file's sources in turn (download.py:
   streamed, resumable, retried), checked against the served sha256 and its content's sha256,
   converted to the form of its path (a .gz path holds a gzip), and renamed into place.
   KERNATTN_DATA_BASE_URL replaces the scheme and host of every URL (the path is kept): a local
   server standing in for the public ones, in tests and at air-gapped sites.
"""

from __future__ import annotations

import bz2
import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..fetch import DataError, cache_name, sha256_bytes
from ..io import atomic_write_bytes
from .catalogue import DataFile
from .download import Failed, fetch

MIRROR_ENV = "KERNATTN_DATA_MIRROR"
HOME_ENV = "KERNATTN_DATA_HOME"
BASE_URL_ENV = "KERNATTN_DATA_BASE_URL"


@dataclass(frozen=True)
class Where:
    mirror: Path | None
    home: Path
    base_url: str | None = None
    scale: str = ""  # for the way-out hint
    progress: bool = True

    @classmethod
    def from_params(cls, params=None, progress: bool = True) -> "Where":
        """Environment first (a machine's own places), then params' `datasets` section."""
        section = getattr(params, "datasets", None)
        mirror = os.environ.get(MIRROR_ENV) or (section.mirror if section else None)
        home = os.environ.get(HOME_ENV) or (section.home if section else None) or default_home()
        if mirror and not Path(mirror).expanduser().is_dir():
            by = MIRROR_ENV if os.environ.get(MIRROR_ENV) else "datasets.mirror"
            raise DataError(f"{by}={mirror}: not a folder; point it to a folder laid out as the data catalogue "
                            f"(dickens/, eval/, fineweb_edu/, images/), or unset it to use the cache")
        return cls(Path(mirror).expanduser() if mirror else None, Path(home).expanduser(),
                   os.environ.get(BASE_URL_ENV) or None, getattr(params, "scale", ""), progress)

    def url(self, url: str) -> str:
        if not self.base_url:
            return url
        parts = urlsplit(url)
        return self.base_url.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")

    def way_out(self, file: DataFile) -> str:
        scale = f" --scale {self.scale}" if self.scale else ""
        return (f"set {MIRROR_ENV} to a folder holding {file.path}, or run `kernattn data pull{scale}` "
                f"on a machine with a network (it fills {self.home})")


def default_home() -> str:
    """The per-user cache folder (pooch.os_cache: ~/.cache/kernattn on Linux, XDG_CACHE_HOME honoured)."""
    import pooch

    return str(pooch.os_cache("kernattn"))


def status(file: DataFile, where: Where) -> tuple[str, Path | None]:
    """("mirror" | "cache" | "missing", path) without reading or fetching anything."""
    if where.mirror is not None and (where.mirror / file.path).is_file():
        return "mirror", where.mirror / file.path
    if (where.home / file.path).is_file():
        return "cache", where.home / file.path
    return "missing", None


def locate(file: DataFile, where: Where, download: bool = True) -> Path:
    """A verified local copy of `file` (see the module docstring); DataError names the way out."""
    kind, path = status(file, where)
    if kind == "mirror":
        _check_mirror(file, path)
        return path
    if kind == "cache":
        return path
    if not download:
        raise DataError(f"{file.path}: not in the mirror or the cache ({where.home}); {where.way_out(file)}")
    return _download(file, where)


def locate_folder(files: tuple[DataFile, ...], where: Where, download: bool = True) -> Path:
    """One folder holding every file of `files` under its own name (they share a folder in the
    catalogue): the mirror's when it holds them all, else the cache's, where a file the mirror
    does hold is copied (verified) and the others are downloaded."""
    folders = {str(Path(f.path).parent) for f in files}
    if len(folders) != 1:
        raise DataError(f"catalogue: {sorted(folders)} are several folders; locate the files one by one")
    if where.mirror is not None and all((where.mirror / f.path).is_file() for f in files):
        for f in files:
            _check_mirror(f, where.mirror / f.path)
        return where.mirror / folders.pop()
    for f in files:
        kind, path = status(f, where)
        if kind == "mirror":
            _check_mirror(f, path)
            atomic_write_bytes(where.home / f.path, path.read_bytes())
        elif kind == "missing":
            locate(f, where, download)
    return where.home / folders.pop()


def _decompress(data: bytes, name: str) -> tuple[bytes, str]:
    """(content, "gzip" | "bzip2" | "none"), by magic bytes; a broken stream is a DataError."""
    try:
        if data[:2] == b"\x1f\x8b":
            return gzip.decompress(data), "gzip"
        if data[:3] == b"BZh":
            return bz2.decompress(data), "bzip2"
    except (OSError, EOFError, ValueError) as exc:
        raise DataError(f"{name}: a damaged compressed file ({exc}); delete it and fetch it again") from None
    return data, "none"


def _check_mirror(file: DataFile, path: Path) -> None:
    if file.stored_sha256 is None and file.content_sha256 is None:
        pins = {s.sha256 for s in file.sources if s.sha256}
        if pins and (got := sha256_bytes(path.read_bytes())) not in pins:  # kept as served (a parquet shard)
            raise DataError(f"{path}: sha256 {got} differs from {file.pin_key or 'the catalogue'}'s "
                            f"{' or '.join(sorted(pins))}; replace the file, or fix the pin")
        return
    data = path.read_bytes()
    if file.stored_sha256 and sha256_bytes(data) == file.stored_sha256:
        return
    content = _decompress(data, str(path))[0]
    got = sha256_bytes(content)
    if file.content_sha256 and got != file.content_sha256:
        raise DataError(f"{path}: sha256 of its content is {got}, the catalogue's is {file.content_sha256}; "
                        f"the mirror's copy is damaged or another file: replace it, or unset {MIRROR_ENV}")


def _stored_form(file: DataFile, served: bytes, url: str) -> bytes:
    """The served bytes, checked against the content's sha256 and put in the form of file.path."""
    content, compression = _decompress(served, url)
    if file.content_sha256 and sha256_bytes(content) != file.content_sha256:
        raise Failed(f"sha256 of the content mismatch: expected {file.content_sha256}, got {sha256_bytes(content)}")
    if file.path.endswith(".gz"):
        return served if compression == "gzip" else gzip.compress(content, 9, mtime=0)
    return content


def _download(file: DataFile, where: Where) -> Path:
    target = where.home / file.path
    reasons = []
    for source in file.sources:
        url = where.url(source.url)
        served = where.home / ".downloads" / cache_name(url)
        served.parent.mkdir(parents=True, exist_ok=True)
        try:
            fetch(url, served, source.sha256, where.progress)
            if file.content_sha256 is None and not file.path.endswith(".gz"):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(served, target)  # nothing to convert or check: already whole and verified
                return target
            atomic_write_bytes(target, _stored_form(file, served.read_bytes(), url))
            return target
        except Failed as exc:
            reasons.append((url, exc))
        except DataError as exc:  # a served file that does not decompress
            reasons.append((url, Failed(str(exc))))
        finally:
            served.unlink(missing_ok=True)
    raise DataError(_message(file, where, reasons))


def _message(file: DataFile, where: Where, reasons: list[tuple[str, Failed]]) -> str:
    said = " | ".join(f"{url}: {exc}" for url, exc in reasons)
    if any("mismatch" in str(exc) for _, exc in reasons):
        return (f"{file.path}: {said}; the download was discarded (nothing kept under that name): rerun to "
                f"fetch it again; if it persists, the source changed: {where.way_out(file)}")
    return f"{file.path}: cannot download: {said}; {where.way_out(file)}"
