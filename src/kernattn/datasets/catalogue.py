"""The data catalogue: every data set any scale reads, with its public sources and sha256s.

    from kernattn.datasets import catalogue
    ds = catalogue.dataset("silesia-dickens")
    ds.files[0].path                 # "dickens/silesia_dickens.txt.gz": its place under a mirror or the cache
    catalogue.needed(params)         # [Need(...), ...]: what a scale's stages read, and the key asking

The data live in catalogue.yaml beside this module (its header says what each field means). A
file is verified by the sha256 of its content (decompressed), and a download also by the sha256 of
the bytes served where we know it. This module only describes; kernattn.datasets.locate finds
and fetches.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ..fetch import DataError
from ..yaml_text import safe_load

CATALOGUE = Path(__file__).with_name("catalogue.yaml")


@dataclass(frozen=True)
class Served:
    """One public URL of a file and what it serves (None: not known to us)."""

    url: str
    bytes: int | None = None
    sha256: str | None = None
    md5: str | None = None  # the upstream's own published digest, kept for provenance


@dataclass(frozen=True)
class DataFile:
    dataset: str
    path: str  # relative, under a mirror folder or the cache
    sources: tuple[Served, ...]
    content_bytes: int | None = None
    content_sha256: str | None = None
    stored_bytes: int | None = None  # the reference mirror's copy at `path`
    stored_sha256: str | None = None
    pin_key: str | None = None  # the params key that pinned a served sha256 (template data sets)

    @property
    def pinned(self) -> bool:
        """Whether any sha256 guards this file (else: downloaded and checked for completeness only)."""
        return bool(self.content_sha256 or any(s.sha256 for s in self.sources))

    @property
    def size(self) -> int | None:
        """Bytes of the first source (what a download costs), else of the content."""
        return next((s.bytes for s in self.sources if s.bytes), None) or self.content_bytes


@dataclass(frozen=True)
class Dataset:
    name: str
    title: str
    licence: str
    provenance: str
    files: tuple[DataFile, ...] = ()
    template: dict | None = None  # {path, url, bytes_each} with an {index}
    user_folder: str | None = None  # the params key naming a folder the user provides

    def shards(self, count: int, pins: dict[str, str] | None = None) -> tuple[DataFile, ...]:
        """The first `count` files of a template data set; `pins` maps "index" -> sha256."""
        if self.template is None:
            raise DataError(f"{CATALOGUE}: {self.name} is not a template data set")
        pins = pins or {}
        return tuple(DataFile(self.name, self.template["path"].format(index=i),
                              (Served(self.template["url"].format(index=i), self.template.get("bytes_each"),
                                      pins.get(str(i))),), pin_key=f"lm.shard_sha256[{i}]" if str(i) in pins else None)
                     for i in range(count))


def _file(name: str, entry: dict) -> DataFile:
    content, stored = entry.get("content") or {}, entry.get("stored") or {}
    sources = tuple(Served(**s) for s in entry.get("sources") or ())
    if not sources:
        raise DataError(f"{CATALOGUE}: {name}: file {entry.get('path')} has no sources")
    return DataFile(name, entry["path"], sources, content.get("bytes"), content.get("sha256"),
                    stored.get("bytes"), stored.get("sha256"))


@functools.cache
def load() -> dict[str, Dataset]:
    """Every data set of catalogue.yaml, by name."""
    doc = safe_load(CATALOGUE.read_text(encoding="utf-8"))
    out = {}
    for name, entry in doc.items():
        files = tuple(_file(name, f) for f in entry.get("files") or ())
        out[name] = Dataset(name, entry["title"], " ".join(entry["licence"].split()),
                            " ".join(entry["provenance"].split()), files, entry.get("template"),
                            entry.get("user_folder"))
    return out


def dataset(name: str, key: str = "") -> Dataset:
    """The data set `name`; an unknown name is a one-line DataError naming `key` and the choices."""
    known = load()
    if name not in known:
        where = f"{key}: " if key else ""
        raise DataError(f"{where}unknown data set {name!r}; the catalogue ({CATALOGUE.name}) has "
                        f"{', '.join(sorted(known))}")
    return known[name]


@dataclass(frozen=True)
class Need:
    """A data set a scale reads: the params key that asks for it, and the files it needs."""

    key: str
    dataset: Dataset
    files: tuple[DataFile, ...]
    folder: str | None = None  # user_folder data sets: the folder the key names (None: unset)


def needed(params) -> list[Need]:
    """What the stages of `params` (a kernattn.config.Params) read from the catalogue."""
    needs = []
    if params.data.dataset and not params.data.mirror and not params.data.urls:
        ds = dataset(params.data.dataset, "data.dataset")
        needs.append(Need("data.dataset", ds, ds.files))
    lm = params.lm
    if lm.dataset and not lm.mirror:
        ds = dataset(lm.dataset, "lm.dataset")
        files = ds.shards(lm.shards, lm.shard_sha256) if ds.template else ds.files
        needs.append(Need("lm.dataset", ds, files))
    if lm.eval_set and not lm.eval_dir:
        ds = dataset(lm.eval_set, "lm.eval_set")
        needs.append(Need("lm.eval_set", ds, ds.files))
    vp = params.vision
    if vp.dataset == "fashion_mnist" and vp.data_root is None:
        ds = dataset("fashion-mnist")
        needs.append(Need("vision.dataset", ds, ds.files))
    elif vp.dataset == "imagenet":
        needs.append(Need("vision.data_root", dataset("imagenet"), (), vp.data_root))
    return needs
