"""The line-wrap study's corpora (issue 17, part 1; gpa-long Section 3.2).

    kernattn prepare-wrap --params params.yaml [--scale S]

Reads the prepared corpus (data.out_dir: train.npy, val.npy, vocab.json, meta.json, as
`kernattn prepare` writes them) and writes, per corpus of studies.wrap.corpora, the same four
files under <studies.out_dir>/wrap/data/<corpus>/ (one atomic folder each): the text re-laid
out by kernattn.studies.wrap.layouts (rewrapped at studies.wrap.width or another width, one line
per paragraph, the planted-period control, the paragraph counterfactual),
each split on its own, encoded with the original vocabulary (vocab.json copied unchanged).
Then each corpus's newline, line and paragraph histograms (kernattn analyze-corpus's
analysis, on that corpus) under <studies.out_dir>/wrap/analysis/<corpus>/corpus/.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time

import numpy as np

from ...config import params_from_args
from ...config.studies import wrap_layout
from ...io import atomic_dir
from . import layouts as wrap_layouts
from .stages import wrap_analysis_dir, wrap_data_dir


def corpus_params(params, corpus: str):
    """The params with data.out_dir and analysis.out_dir moved to the counterfactual's folders
    (what `kernattn analyze-corpus` and the char trainer read)."""
    return dataclasses.replace(
        params, data=dataclasses.replace(params.data, out_dir=str(wrap_data_dir(params, corpus))),
        analysis=dataclasses.replace(params.analysis, out_dir=str(wrap_analysis_dir(params, corpus))))


def write_corpus(params, corpus: str) -> dict:
    """One counterfactual corpus's folder; returns its meta.json content."""
    from ...errors import UsageError
    from ...tracks.char.data import load_meta, load_split, load_vocab
    from ...tracks.char.stages import data_dir

    src = data_dir(params)
    try:
        chars, original = load_vocab(src), load_meta(src)
        train, val = load_split(src, "train"), load_split(src, "val")
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{src}: cannot read the prepared corpus ({exc}); run kernattn prepare first") from None
    t0 = time.perf_counter()
    w = params.studies.wrap
    kind, value = wrap_layout(corpus, w.width)
    try:
        new_train, new_val, changes = wrap_layouts.transform_split(train, val, chars, corpus, w.width,
                                                                   w.original_width)
    except ValueError as exc:  # a corpus that changed more than its layout would test more than it says
        raise UsageError(f"{wrap_data_dir(params, corpus)}: corpus {corpus!r} of studies.wrap.corpora changes "
                         f"{src} beyond its layout ({exc}); a bug in kernattn.studies.wrap.layouts: fix the "
                         f"layout, or leave {corpus!r} out of studies.wrap.corpora meanwhile") from None
    meta = {"corpus": corpus, "layout": {"kind": kind, "value": value,
                                         "line_width": w.original_width if kind == "paragraphs" else None},
            "source_dir": str(src), "source_cleaned_sha256": original.get("cleaned_sha256"),
            "vocab_size": len(chars), "n_train": int(new_train.size), "n_val": int(new_val.size),
            "n_chars": int(new_train.size + new_val.size),
            "newlines": int(sum(np.count_nonzero(a == chars.index("\n")) for a in (new_train, new_val))),
            "original": {"n_train": int(train.size), "n_val": int(val.size)},
            "whitespace_changes": changes,  # kernattn.studies.wrap.checks: what the layout changed, per split
            "seconds": round(time.perf_counter() - t0, 3)}
    with atomic_dir(wrap_data_dir(params, corpus)) as tmp:
        np.save(tmp / "train.npy", new_train)
        np.save(tmp / "val.npy", new_val)
        shutil.copyfile(src / "vocab.json", tmp / "vocab.json")  # the same ids: the same file
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def run(args: argparse.Namespace) -> int:
    from ...tracks.char.analysis.corpus import analyze_corpus

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    for corpus in params.studies.wrap.corpora:
        meta = write_corpus(params, corpus)
        path = analyze_corpus(corpus_params(params, corpus))
        peak = json.loads(path.read_text())["splits"]["train"]
        changed = sum(c["characters_changed"] for c in meta["whitespace_changes"].values())
        print(f"kernattn prepare-wrap: {corpus}: {meta['n_train']:,} + {meta['n_val']:,} characters, "
              f"{meta['newlines']:,} newlines, {changed:,} whitespace characters changed (checked); newline peak {peak['peak']} (sharp: {peak['sharp_peak']}); "
              f"wrote {wrap_data_dir(params, corpus)}")
    return 0
