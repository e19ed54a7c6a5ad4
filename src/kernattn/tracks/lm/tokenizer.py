"""BPE tokenizer in the nanochat style: trained with rustbpe, encoded with tiktoken.

    enc = train_bpe(texts, vocab_size=2048)    # a tiktoken.Encoding
    save(enc, folder); enc = load(folder)      # tokenizer.tiktoken + tokenizer.json
    token_bytes(enc)                           # UTF-8 byte length of every id (0: special)

Pre-tokenisation is the GPT-4 split pattern with numbers in groups of 1-2 digits (nanochat's
choice for small vocabularies). The special tokens come after the BPE ranks, so the BPE gets
vocab_size - len(SPECIAL_TOKENS) ids. Files: `tokenizer.tiktoken` is tiktoken's own rank
format (base64 token, rank per line); `tokenizer.json` holds the pattern and special ids;
`token_bytes.npy` is what bits per byte divides by.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ...io import atomic_path, atomic_write_json

# GPT-4's pattern (cl100k) with \p{N}{1,2} instead of {1,3}: contractions, letter runs with
# one optional leading non-letter, 1-2 digit groups, punctuation runs, newlines, spaces.
SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s+"""
)
BOS = "<|bos|>"
# nanochat's set: BOS delimits documents; the chat tokens are reserved for later fine-tuning.
SPECIAL_TOKENS = (BOS, "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                  "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>")
RANKS_FILE, META_FILE, BYTES_FILE = "tokenizer.tiktoken", "tokenizer.json", "token_bytes.npy"


class TokenizerError(ValueError):
    """A tokenizer folder that cannot be used (one line naming the file)."""


def _encoding(ranks: dict[bytes, int], name: str = "kernattn-bpe"):
    import tiktoken

    offset = len(ranks)
    specials = {tok: offset + i for i, tok in enumerate(SPECIAL_TOKENS)}
    return tiktoken.Encoding(name=name, pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


def train_bpe(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE of `vocab_size` ids in all (specials included) on `texts`."""
    import rustbpe

    n_bpe = vocab_size - len(SPECIAL_TOKENS)
    if n_bpe < 256:
        raise TokenizerError(f"vocab_size={vocab_size} leaves {n_bpe} BPE ids; need >= 256 (the bytes)")
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(texts), n_bpe, pattern=SPLIT_PATTERN)
    ranks = {bytes(k): int(v) for k, v in tok.get_mergeable_ranks()}
    return _encoding(ranks)


def bos_id(enc) -> int:
    return enc.encode_single_token(BOS)


def token_bytes(enc) -> np.ndarray:
    """int32 [n_vocab]: UTF-8 bytes each id stands for; 0 for the special tokens (nanochat's
    convention: they carry no text, so BPB neither counts their bytes nor their loss)."""
    special = set(enc._special_tokens.values())
    return np.array([0 if i in special else len(enc.decode_single_token_bytes(i)) for i in range(enc.n_vocab)],
                    dtype=np.int32)


def encode_docs(enc, docs: Iterable[str]) -> list[list[int]]:
    """[BOS] + tokens of each document (special-token text in a document is plain text)."""
    bos = bos_id(enc)
    return [[bos, *ids] for ids in enc.encode_ordinary_batch(list(docs))]


def save(enc, folder: str | Path) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # tiktoken's .tiktoken format (its dump_tiktoken_bpe needs the optional blobfile package).
    lines = (f"{base64.b64encode(t).decode()} {r}\n" for t, r in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1]))
    with atomic_path(folder / RANKS_FILE) as tmp:
        Path(tmp).write_text("".join(lines))
    atomic_write_json(folder / META_FILE, {"pattern": SPLIT_PATTERN, "special_tokens": enc._special_tokens,
                                           "n_vocab": enc.n_vocab})
    with atomic_path(folder / BYTES_FILE) as tmp:
        np.save(tmp, token_bytes(enc))


def load(folder: str | Path):
    folder = Path(folder)
    ranks_path, meta_path = folder / RANKS_FILE, folder / META_FILE
    for p in (ranks_path, meta_path):
        if not p.is_file():
            raise TokenizerError(f"{p}: no such file; run `kernattn prepare-lm` first")
    try:
        meta = json.loads(meta_path.read_text())
        ranks = {base64.b64decode(tok): int(rank) for tok, rank in
                 (line.split() for line in ranks_path.read_text().splitlines() if line)}
    except (ValueError, OSError, TypeError) as exc:
        raise TokenizerError(f"{folder}: unreadable tokenizer ({exc}); rerun `kernattn prepare-lm`") from None
    if meta.get("pattern") != SPLIT_PATTERN or meta.get("special_tokens") != {t: len(ranks) + i for i, t in enumerate(SPECIAL_TOKENS)}:
        raise TokenizerError(f"{meta_path}: pattern or special tokens differ from this version; rerun `kernattn prepare-lm`")
    return _encoding(ranks)


def load_token_bytes(folder: str | Path) -> np.ndarray:
    path = Path(folder) / BYTES_FILE
    if not path.is_file():
        raise TokenizerError(f"{path}: no such file; run `kernattn prepare-lm` first")
    return np.load(path)
