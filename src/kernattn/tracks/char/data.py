"""Corpora for training: fetching (fetch.py), the char track's corpus stage (corpus.py: any
text, Dickens by default), and readers.

`kernattn prepare` writes, in data.out_dir (default results/<scale>/data/<data.corpus>):
    train.npy, val.npy   1-D uint8 numpy arrays of token ids (np.save)
    vocab.json           {"chars": [c0, c1, ...], "size": N}: id i is the character chars[i]
    meta.json            provenance: source, sha256s, sizes, cleaning counts, timestamp

Readers for the later stages:
    chars = load_vocab(out_dir)
    train = load_split(out_dir, "train")     # np.ndarray uint8 (memory-mapped)
    text = decode(train[:100], chars); ids = encode("Hello", chars)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

__all__ = ["SPLIT_FILES", "VOCAB_FILE", "META_FILE", "load_vocab", "load_split", "load_meta",
           "decode", "encode"]

SPLIT_FILES = {"train": "train.npy", "val": "val.npy"}
VOCAB_FILE = "vocab.json"
META_FILE = "meta.json"


def load_vocab(out_dir: str | os.PathLike) -> list[str]:
    """The characters of vocab.json, in id order."""
    doc = json.loads((Path(out_dir) / VOCAB_FILE).read_text(encoding="utf-8"))
    return list(doc["chars"])


def load_meta(out_dir: str | os.PathLike) -> dict:
    return json.loads((Path(out_dir) / META_FILE).read_text(encoding="utf-8"))


def load_split(out_dir: str | os.PathLike, split: str, mmap: bool = True) -> np.ndarray:
    """train or val token ids (uint8), memory-mapped read-only unless mmap=False."""
    if split not in SPLIT_FILES:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLIT_FILES)}")
    return np.load(Path(out_dir) / SPLIT_FILES[split], mmap_mode="r" if mmap else None, allow_pickle=False)


def decode(ids, chars: list[str]) -> str:
    """Token ids -> text (vectorised; fine for the whole corpus)."""
    table = np.array([ord(c) for c in chars], dtype="<u4")
    return table[np.asarray(ids, dtype=np.int64)].tobytes().decode("utf-32-le")


def encode(text: str, chars: list[str]) -> np.ndarray:
    """Text -> uint8 ids; a character outside the vocabulary raises ValueError naming it."""
    index = {c: i for i, c in enumerate(chars)}
    missing = sorted(set(text) - index.keys())
    if missing:
        raise ValueError(f"characters not in the vocabulary: {', '.join(map(repr, missing[:10]))}")
    return np.fromiter((index[c] for c in text), dtype=np.uint8, count=len(text))
