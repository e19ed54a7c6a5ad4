"""Atomic writes: a file or a folder is either complete or absent, never half written.

    atomic_write_bytes(path, data)          # also atomic_write_text / atomic_write_json
    with atomic_path("out/ckpt.pt") as tmp:  # write tmp yourself (torch.save, np.save, ...)
        torch.save(state, tmp)
    with atomic_dir("results/tiny/data/dickens") as tmp:   # build a whole folder, then swap it in
        np.save(tmp / "train.npy", ids)

How: the data is written under a temporary name in the SAME folder as the target (so the
final os.replace / os.rename stays on one file system and is atomic), flushed to disk, then
renamed onto the target. If the body raises (any exception, KeyboardInterrupt included), the
temporary file or folder is removed and an existing target is left untouched.

Temporary names start with "." and contain ".tmp-" (e.g. ".train.tmp-3f9a1c2e.npy"; the
suffix is kept, because np.save, torch.save's callers and matplotlib's savefig look at it).
A process killed with SIGKILL can leave one behind; it is never mistaken for the target.

atomic_dir replaces an existing folder by two renames (old -> ".NAME.old-*", new -> NAME),
so for a moment NAME is absent, never partial; the old folder is then deleted.

Appends (metrics.jsonl) go through LineAppender: each line is one os.write on an O_APPEND
descriptor, so a crash leaves a line complete or absent (readers still drop an unterminated
last line, see read_lines). Checkpoints are read with load_torch: weights_only=True always
(tensors and plain containers; no pickled code from a file is ever run), and every failure
is one line (LoadError) naming the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_dir",
           "LineAppender", "read_lines", "LoadError", "load_torch", "atomic_torch_save"]


def _temp_name(path: Path, kind: str = "tmp") -> Path:
    token = uuid.uuid4().hex[:8]
    return path.with_name(f".{path.stem}.{kind}-{token}{path.suffix}")


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it is os.replace'd onto `path`.

    The temporary file does not exist yet: the body creates it. The parent folder is created
    if missing. On an exception the temporary file is removed and `path` is not touched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically; returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` atomically (no newline translation); returns the path."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """torch.save(obj) to `path`, atomically (a checkpoint is the old one or the new one)."""
    import torch  # io is imported by modules that never touch torch: load it only here

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)
    return Path(path)


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2,
                      sort_keys: bool = False) -> Path:
    """Write `obj` as JSON (UTF-8, trailing newline) to `path` atomically; returns the path.

    The object is serialised before anything is written, so an unserialisable value raises
    (TypeError) with no file created.
    """
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False, allow_nan=False)
    return atomic_write_text(path, text + "\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty folder next to `path`; on success it replaces `path` as a whole.

    Fill the yielded folder (plain writes are fine inside it). On success every file in it is
    flushed to disk and the folder is renamed to `path` (an existing `path`, folder or file,
    is replaced). On an exception the temporary folder is deleted and `path` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    tmp.mkdir()
    try:
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file() and not child.is_symlink():
                _fsync_file(child)
        old = None
        if path.exists() or path.is_symlink():
            old = _temp_name(path, "old")
            os.rename(path, old)
        try:
            os.rename(tmp, path)
        except BaseException:
            if old is not None:
                os.rename(old, path)  # put the previous output back
            raise
        if old is not None:
            _remove(old)
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class LineAppender:
    """Append whole lines to a file: one os.write per line on an O_APPEND descriptor.

    A buffered text file may split a line over two write calls, so a killed process could leave
    a broken line in the middle of the file; here every line but the last is whole. The last
    one can be cut short: Linux stops a write to a regular file at a page boundary when SIGKILL
    arrives during it. Such a tail has no newline: read_lines drops it, and a resumed run
    rewrites the file to the lines its checkpoint counts (engine.metrics.MetricsLog). fsync()
    pushes the lines to disk (called before a checkpoint that counts them)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, line: str) -> None:
        data = (line if line.endswith("\n") else line + "\n").encode("utf-8")
        view = memoryview(data)
        while view:  # a short write only happens on a full disk: keep going or raise
            view = view[os.write(self._fd, view):]

    def fsync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "LineAppender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_lines(path: str | os.PathLike) -> list[str]:
    """The complete (newline-terminated) lines of a file written by LineAppender; a last line
    without its newline (a write cut by power loss) is dropped."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.split("\n")
    return lines[:-1]  # the piece after the last newline: "" or an unterminated line


class LoadError(ValueError):
    """A checkpoint that cannot or must not be loaded; the message is one line naming the file."""


def load_torch(path: str | os.PathLike, fix: str = "") -> Any:
    """torch.load(path, weights_only=True) on the CPU, with one-line errors.

    weights_only=True means the unpickler only rebuilds tensors and plain containers (dict,
    list, tuple, str, numbers): a file carrying any other pickled object (a class, a function
    call) is refused before anything in it runs. `fix` ends each message (what to do)."""
    import pickle
    import re

    import torch

    path = Path(path)
    tail = f"; {fix}" if fix else ""
    if path.is_dir():
        raise LoadError(f"{path}: is a directory, not a checkpoint file{tail}")
    if not path.is_file():
        raise LoadError(f"{path}: no such checkpoint file{tail}")
    if path.stat().st_size == 0:
        raise LoadError(f"{path}: empty checkpoint file (0 bytes){tail}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))  # the class or function it names
        what = f" (it references {found.group(1)})" if found else ""
        raise LoadError(f"{path}: refused: holds a pickled Python object{what}, not only tensors and "
                        f"plain containers; checkpoints load with weights_only=True and this file was "
                        f"not written by kernattn{tail}") from None
    except (RuntimeError, EOFError, OSError, KeyError, ValueError, IndexError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0].split(". ")[0]
        raise LoadError(f"{path}: unreadable checkpoint, truncated or corrupt "
                        f"({type(exc).__name__}{': ' + first if first else ''}){tail}") from None
