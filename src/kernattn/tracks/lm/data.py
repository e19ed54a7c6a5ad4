"""Stage `kernattn prepare-lm`: documents -> BPE tokenizer -> BOS-delimited token streams.

    kernattn prepare-lm [--params params.yaml] [--scale tiny]

Documents come from `lm.mirror` when set (a local jsonl or jsonl.gz of {"text": ...}; the
tiny and micro scales use ../shared/data/fineweb_edu/, which is a 1,000-document C4 sample,
NOT FineWeb-Edu), else from `lm.shards` FineWeb-Edu parquet shards (column `text`) downloaded
from `lm.shard_url` (nanochat's shuffled copy) into <data_dir>/../shards/, each checked against
`lm.shard_sha256[index]` when given and recorded in shards.json either way. The last shard
(mirror: the last `val_docs` documents) is the validation split.

The tokenizer is trained on the training documents only (the first `tokenizer_chars`
characters of them). Every document becomes [BOS] + its tokens; the splits are the
concatenations, stored as uint16 in train.npy / val.npy. Outputs in `lm.data_dir`, one folder
written atomically: train.npy, val.npy, tokenizer.tiktoken, tokenizer.json, token_bytes.npy,
meta.json (sources, sha256s, counts).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from ...fetch import DataError, download, read_local, sha256_bytes
from ...io import atomic_dir, atomic_path, atomic_write_json
from . import tokenizer as tok
from .stages import load_stage



def read_jsonl_docs(path: str | Path) -> list[str]:
    """The `text` of every line of a jsonl(.gz) file; a bad line is a one-line DataError."""
    src = read_local(path, hint=" (set lm.mirror to a jsonl or jsonl.gz of {\"text\": ...} documents)")
    docs = []
    for lineno, line in enumerate(src.data.decode("utf-8", errors="strict").splitlines(), 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
            if not isinstance(text, str):
                raise TypeError("text is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{path}: line {lineno}: not a JSON object with a string 'text' ({exc}); "
                            f"fix or remove the line") from None
        docs.append(text)
    if not docs:
        raise DataError(f"{path}: no documents; expected one JSON object per line")
    return docs


def shard_path(data_dir: str | Path, index: int) -> Path:
    return Path(data_dir).parent / "shards" / f"shard_{index:05d}.parquet"


def fetch_shard(lm, index: int) -> tuple[Path, str]:
    """Download shard `index` once (atomic), check its pinned sha256; -> (path, sha256)."""
    path = shard_path(lm.data_dir, index)
    pinned = lm.shard_sha256.get(str(index))
    if not path.is_file():
        src = download(lm.shard_url.format(index=index))
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(src.stored)
    digest = sha256_bytes(path.read_bytes())
    if pinned and digest != pinned:
        raise DataError(f"{path}: sha256 {digest} differs from lm.shard_sha256[{index}] = {pinned}; "
                        f"delete the file to download it again, or fix the pin")
    return path, digest


def read_parquet_docs(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return [str(t) for t in pq.read_table(path, columns=["text"]).column("text").to_pylist()]
    except Exception as exc:  # noqa: BLE001 (pyarrow raises many kinds)
        raise DataError(f"{path}: unreadable parquet shard ({type(exc).__name__}: {exc}); delete it to "
                        f"download it again") from None


def sources(lm) -> tuple[Callable[[], Iterator[list[str]]], Callable[[], Iterator[list[str]]], dict]:
    """(train groups, val groups, provenance): each a function returning an iterator over lists
    of documents (one list per shard), so a split can be read twice (tokenizer, then encoding)
    without holding more than one shard in memory."""
    if lm.mirror:
        docs = read_jsonl_docs(lm.mirror)
        if lm.max_docs:
            docs = docs[: lm.max_docs]
        if len(docs) <= lm.val_docs:
            raise DataError(f"{lm.mirror}: {len(docs)} documents, not more than lm.val_docs={lm.val_docs}; "
                            f"lower lm.val_docs")
        prov = {"kind": "mirror", "path": lm.mirror, "sha256": sha256_bytes(Path(lm.mirror).read_bytes()),
                "note": "local mirror; ../shared/data/fineweb_edu/ holds a C4 sample, not FineWeb-Edu"}
        train, val = docs[: -lm.val_docs], docs[-lm.val_docs:]
        return (lambda: iter([train])), (lambda: iter([val])), prov
    if lm.shards < 2:
        raise DataError("lm.shards must be >= 2 when downloading (the last shard is validation)")
    shards = [fetch_shard(lm, i) for i in range(lm.shards)]
    atomic_write_json(Path(lm.data_dir).parent / "shards.json",
                      {str(i): {"path": str(p), "sha256": d} for i, (p, d) in enumerate(shards)})

    def train():
        left = lm.max_docs
        for path, _ in shards[:-1]:
            docs = read_parquet_docs(path)
            if left is not None:
                docs, left = docs[:left], left - min(left, len(docs))
            if docs:
                yield docs

    prov = {"kind": "download", "url": lm.shard_url, "shards": {str(i): d for i, (_, d) in enumerate(shards)}}
    return train, (lambda: iter([read_parquet_docs(shards[-1][0])])), prov


def capped(docs: Iterable[str], max_chars: int) -> Iterator[str]:
    """Documents up to `max_chars` characters in all (the last one cut)."""
    left = max_chars
    for d in docs:
        if left <= 0:
            return
        yield d[:left]
        left -= len(d)


def write_stream(enc, groups: Iterable[list[str]], path: Path) -> dict:
    """[BOS] + tokens of every document, concatenated into the uint16 .npy `path`: encoded one
    group at a time into a raw side file, then copied into a memory-mapped .npy of the final
    length (the length is known only at the end)."""
    raw = path.with_suffix(".raw")
    n_docs = n_bytes = n_tokens = 0
    with open(raw, "wb") as fh:
        for docs in groups:
            ids = np.fromiter((i for doc in tok.encode_docs(enc, docs) for i in doc), dtype=np.int64)
            fh.write(ids.astype(np.uint16).tobytes())
            n_docs += len(docs)
            n_bytes += sum(len(d.encode()) for d in docs)
            n_tokens += ids.size
    src = np.memmap(raw, dtype=np.uint16, mode="r", shape=(n_tokens,)) if n_tokens else np.zeros(0, np.uint16)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(n_tokens,))
    for i in range(0, n_tokens, 1 << 26):
        out[i:i + (1 << 26)] = src[i:i + (1 << 26)]
    out.flush()
    del out, src
    raw.unlink()
    return {"docs": n_docs, "tokens": n_tokens, "bytes": n_bytes}


def prepare(lm) -> dict:
    train, val, prov = sources(lm)
    enc = tok.train_bpe(capped((d for docs in train() for d in docs), lm.tokenizer_chars), lm.vocab_size)
    with atomic_dir(lm.data_dir) as tmp:
        counts = {split: write_stream(enc, groups(), tmp / f"{split}.npy") for split, groups in
                  (("train", train), ("val", val))}
        meta = {"source": prov, "vocab_size": enc.n_vocab, "bos_id": tok.bos_id(enc),
                **{f"{split}_{k}": v for split, c in counts.items() for k, v in c.items()}}
        tok.save(enc, tmp)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def run(args: argparse.Namespace) -> int:
    from ...errors import UsageError

    params, _ = load_stage(args, with_run=False)
    lm = params.lm
    try:
        meta = prepare(lm)
    except (DataError, tok.TokenizerError) as exc:
        raise UsageError(str(exc)) from None
    print(f"kernattn prepare-lm: {meta['train_tokens']:,} train / {meta['val_tokens']:,} val tokens, "
          f"vocab {meta['vocab_size']} -> {lm.data_dir}")
    return 0
