"""The toy track's data: one stream of random token ids (kernattn prepare-toy); a sequence's
target is the stream `lag` tokens back, so attention at a fixed offset solves it."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ...config import params_from_args
from ...io import atomic_write_bytes
from .stages import DATA, data_output

TOKENS = 4096  # the stream's length: training and validation windows are cut from it


def write_stream(path: str | Path, vocab: int, seed: int = 0) -> None:
    import io

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    stream = np.random.default_rng(seed).integers(0, vocab, TOKENS).astype(np.int64)
    buffer = io.BytesIO()
    np.save(buffer, stream)
    atomic_write_bytes(path, buffer.getvalue())


def load_stream(data_dir: str | Path) -> np.ndarray:
    return np.load(Path(data_dir) / DATA)


def stand_in(p, folder) -> tuple[dict, dict]:
    """The preflight's stand-in data (the same stream, written under `folder`), and the
    overrides that step the smallest batch."""
    write_stream(Path(folder) / DATA, p.toy.vocab)
    return {"toy": {"data_dir": str(folder)}}, {"toy": {"batch_size": 1}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    p = params_from_args(args)
    Path(p.toy.data_dir).mkdir(parents=True, exist_ok=True)
    write_stream(data_output(p), p.toy.vocab)
    print(f"wrote {data_output(p)}")
    return 0
