"""The char track's data: readers of the prepared corpus (what corpus.py, `kernattn prepare`,
writes) and the training and validation windows.

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

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from ...errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["SPLIT_FILES", "VOCAB_FILE", "META_FILE", "VAL_SEED", "load_vocab", "load_split", "load_meta",
           "decode", "encode", "load_data", "windows", "validation_starts", "split_starts", "evaluate", "loss_sums"]

SPLIT_FILES = {"train": "train.npy", "val": "val.npy"}
VOCAB_FILE = "vocab.json"
META_FILE = "meta.json"
VAL_SEED = 20240917  # one fixed set of validation windows for every run


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


# ----------------------------------------------------------------------------- training and validation windows
# torch is imported inside: `kernattn prepare` and `analyze-corpus` read this module too and do not need it.
def load_data(out_dir: str | os.PathLike, context: int) -> SimpleNamespace:
    """train/val uint8 token tensors, vocab size and a digest of the token arrays."""
    root = Path(out_dir)
    arrays = {split: _token_array(root / f"{split}.npy", context) for split in ("train", "val")}
    vocab_path = root / "vocab.json"
    try:
        vocab_size = int(json.loads(vocab_path.read_text())["size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{vocab_path}: cannot read the vocabulary size ({exc})") from None
    top = max(int(arrays["train"].max()), int(arrays["val"].max()))
    if top >= vocab_size:
        raise UsageError(f"{root}: token id {top} is outside the vocabulary of size {vocab_size}")
    import torch

    h = hashlib.sha256()
    for split in ("train", "val"):
        h.update(arrays[split].tobytes())
    return SimpleNamespace(train=torch.from_numpy(np.ascontiguousarray(arrays["train"])),
                           val=torch.from_numpy(np.ascontiguousarray(arrays["val"])),
                           vocab_size=vocab_size, digest=h.hexdigest()[:16], out_dir=str(root))


def _token_array(path: Path, context: int) -> np.ndarray:
    if not path.is_file():
        raise UsageError(f"{path}: no such file; prepare the corpus first (kernattn prepare)")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise UsageError(f"{path}: unreadable token array, truncated or corrupt ({type(exc).__name__}: "
                         f"{first}); rerun kernattn prepare (with the same params) to rewrite it") from None
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise UsageError(f"{path}: expected a 1-D uint8 array of token ids, got {arr.dtype} {arr.shape}")
    if arr.size < context + 2:
        raise UsageError(f"{path}: {arr.size} tokens, fewer than context + 2 = {context + 2}")
    return arr


def windows(data: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of context + 1 tokens at `starts` -> (inputs, next-token targets), int64 [B, context]."""
    import torch

    offsets = torch.arange(context + 1, device=data.device)
    chunk = data[starts.to(data.device)[:, None] + offsets].long()
    return chunk[:, :-1], chunk[:, 1:]


def validation_starts(n_val: int, context: int, eval_batches: int, batch_size: int) -> torch.Tensor:
    """[eval_batches, batch_size] start offsets of the fixed validation windows (VAL_SEED)."""
    import torch

    gen = torch.Generator().manual_seed(VAL_SEED)
    return torch.randint(0, n_val - context, (eval_batches, batch_size), generator=gen)


def split_starts(n_val: int, context: int) -> torch.Tensor:
    """The start of every non-overlapping window of context + 1 characters of the validation
    split (the last character of one window is the first input of the next)."""
    import torch

    return torch.arange(0, n_val - context, context)


def evaluate(fwd, model, data: torch.Tensor, starts: torch.Tensor, context: int, autocast) -> float:
    """Mean cross-entropy per character over the fixed validation windows `starts` [eval_batches, B]."""
    total, count, _, _ = loss_sums(fwd, model, data, starts, context, autocast).tolist()
    return total / count


def loss_sums(fwd, model, data: torch.Tensor, batches, context: int, autocast) -> torch.Tensor:
    """float64 [summed cross-entropy, characters, summed squares of each window's mean
    cross-entropy, windows] over the windows of `batches` (rows of starts): sums, so that ranks
    scoring shares of the windows add up to the whole (dist.py); the squares give the spread
    over windows (the evaluation's sampling error)."""
    import torch
    import torch.nn.functional as F

    was_training = model.training
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=data.device)
    with torch.no_grad():
        for batch in batches:
            x, y = windows(data, batch, context)
            with autocast():
                logits = fwd(x)
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
            sums[0] += ce.double().sum()
            sums[1] += ce.numel()
            sums[2] += ce.double().view(y.shape).mean(dim=1).square().sum()
            sums[3] += y.shape[0]
    model.train(was_training)
    return sums


# ----------------------------------------------------------------------------- preflight stand-in
STAND_IN_VOCAB = 256  # the most characters a uint8 corpus holds: the largest embedding the track builds


def stand_in(p, folder: str | os.PathLike, period: int | None = None) -> tuple[dict, dict]:
    """Write random prepared data in `folder` (vocab.json, train.npy, val.npy as `kernattn prepare`
    writes them) so that `kernattn preflight` can build and step a model at the real context with
    no corpus; returns the params overrides that read it, and those that train one window a step.
    `period`: a text a model learns in a few steps instead (ids repeating with that period, from
    a random offset in each split), for `kernattn check-variant`'s training check."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    context = p.model.context
    rng = np.random.default_rng(0)
    for split in SPLIT_FILES.values():
        ids = (rng.integers(0, STAND_IN_VOCAB, 4 * (context + 2)) if period is None
               else (np.arange(64 * (context + 2)) + rng.integers(period)) % period)
        np.save(root / split, ids.astype(np.uint8))
    chars = [chr(i) for i in range(STAND_IN_VOCAB)]
    (root / VOCAB_FILE).write_text(json.dumps({"chars": chars, "size": STAND_IN_VOCAB}), encoding="utf-8")
    (root / META_FILE).write_text(json.dumps({"source": "kernattn preflight stand-in (random ids)"}))
    return {"data": {"out_dir": str(root)}}, {"train": {"batch_size": 1, "micro_batch": None}}
