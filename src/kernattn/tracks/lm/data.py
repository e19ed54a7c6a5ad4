"""Stage `kernattn prepare-lm`: documents -> BPE tokenizer -> BOS-delimited token streams.

    kernattn prepare-lm [--params params.yaml] [--scale tiny]

Documents come from `lm.mirror` when set (your local jsonl or jsonl.gz of {"text": ...}), else
from the catalogue's `lm.dataset` (kernattn.datasets: the data mirror, the cache, or a verified
download): a jsonl(.gz) (the tiny and micro scales' c4-sample, 1,000 C4 documents, NOT
FineWeb-Edu) or a template data set, the first `lm.shards` FineWeb-Edu parquet shards (column
`text`, nanochat's shuffled copy), each checked against `lm.shard_sha256[index]` when given and
recorded in shards.json either way. The last shard (a jsonl: the last `val_docs` documents) is
the validation split.

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

from ...datasets import Where, dataset, locate, locate_folder, status
from ...fetch import DataError, read_local, sha256_bytes
from ...io import atomic_dir, atomic_write_json
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


def fetch_shards(lm, where: Where) -> list[tuple[Path, str]]:
    """The first lm.shards shards of the template data set lm.dataset, each found or fetched
    through the catalogue (checked against lm.shard_sha256[index] when pinned); -> (path, sha256)."""
    ds = dataset(lm.dataset, "lm.dataset")
    return [(path, sha256_bytes(path.read_bytes())) for path in
            (locate(f, where) for f in ds.shards(lm.shards, lm.shard_sha256))]


def eval_folder(params, download: bool = True) -> Path | None:
    """The folder of the CORE task files: lm.eval_dir, else the catalogue's lm.eval_set (found in the
    mirror or the cache, else downloaded; None when `download` is false and it is not here)."""
    lm = params.lm
    if lm.eval_dir:
        return Path(lm.eval_dir)
    files = dataset(lm.eval_set, "lm.eval_set").files
    where = Where.from_params(params, progress=download)
    if not download and any(status(f, where)[0] == "missing" for f in files):
        return None
    return locate_folder(files, where, download)


def read_parquet_docs(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return [str(t) for t in pq.read_table(path, columns=["text"]).column("text").to_pylist()]
    except Exception as exc:  # noqa: BLE001 (pyarrow raises many kinds)
        raise DataError(f"{path}: unreadable parquet shard ({type(exc).__name__}: {exc}); delete it to "
                        f"download it again") from None


def sources(lm, where: Where | None = None) -> tuple[Callable[[], Iterator[list[str]]], Callable[[], Iterator[list[str]]], dict]:
    """(train groups, val groups, provenance): each a function returning an iterator over lists
    of documents (one list per shard), so a split can be read twice (tokenizer, then encoding)
    without holding more than one shard in memory."""
    where = where or Where.from_params()
    ds = dataset(lm.dataset, "lm.dataset") if lm.dataset and not lm.mirror else None
    if ds is None or not ds.template:
        if ds is None and not lm.mirror:
            raise DataError("no LM documents: set lm.dataset (a catalogue data set) or lm.mirror (a local jsonl)")
        path = lm.mirror or str(locate(ds.files[0], where))
        docs = read_jsonl_docs(path)
        if lm.max_docs:
            docs = docs[: lm.max_docs]
        if len(docs) <= lm.val_docs:
            raise DataError(f"{path}: {len(docs)} documents, not more than lm.val_docs={lm.val_docs}; "
                            f"lower lm.val_docs")
        prov = {"kind": "mirror" if lm.mirror else "catalogue", "path": path, "dataset": lm.dataset if ds else None,
                "note": ds.title if ds else "your local file (lm.mirror)",
                "sha256": sha256_bytes(Path(path).read_bytes())}
        train, val = docs[: -lm.val_docs], docs[-lm.val_docs:]
        return (lambda: iter([train])), (lambda: iter([val])), prov
    if lm.shards < 2:
        raise DataError("lm.shards must be >= 2 when downloading (the last shard is validation)")
    shards = fetch_shards(lm, where)
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

    prov = {"kind": "catalogue", "dataset": lm.dataset, "shards": {str(i): d for i, (_, d) in enumerate(shards)}}
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


def prepare(lm, where: Where | None = None) -> dict:
    train, val, prov = sources(lm, where)
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
        meta = prepare(lm, Where.from_params(params))
        core_dir = eval_folder(params)  # fetched here, in the data stage, not by every rank of eval-lm
    except (DataError, tok.TokenizerError) as exc:
        raise UsageError(str(exc)) from None
    print(f"kernattn prepare-lm: {meta['train_tokens']:,} train / {meta['val_tokens']:,} val tokens, "
          f"vocab {meta['vocab_size']} -> {lm.data_dir}; CORE-6 tasks in {core_dir}")
    return 0


# ----------------------------------------------------------------------------- preflight stand-in
def stand_in(p, folder) -> tuple[dict, dict]:
    """Write random token streams and meta.json in `folder` (what prepare-lm writes, at the
    configured vocabulary) so that `kernattn preflight` can build and step a model at the real
    context with no tokenizer or shards; returns the params overrides that read them, and those
    that train one sequence a step (batch 1, no accumulation)."""
    lm = p.lm
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tokens = 4 * (lm.context + 2)
    for split in ("train", "val"):
        np.save(root / f"{split}.npy", rng.integers(0, lm.vocab_size, tokens, dtype=np.uint16))
    meta = {"source": "kernattn preflight stand-in (random ids)", "vocab_size": lm.vocab_size, "bos_id": 0,
            "train_tokens": tokens, "val_tokens": tokens}
    (root / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {"lm": {"data_dir": str(root)}}, {"lm": {"batch_size": 1, "grad_accum": 1, "micro_batch": None}}
