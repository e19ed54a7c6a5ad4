"""Newline separations of the corpus, once per scale (gpa-long, 3.2 and Figure 5b).

    kernattn analyze-corpus --params params.yaml [--scale S]

Reads the prepared corpus (data.out_dir: train.npy, val.npy, vocab.json) and writes
<analysis.out_dir>/corpus/ as one atomic folder:
    newlines.csv   separation, train, val: counts per separation 0..analysis.max_separation
    summary.json   per split: characters, newlines, separations, the main peak above lag 1
                   (kernattn.tracks.char.analysis.newlines) and its count, the count at lag 1, the number
                   of separations beyond max_separation
    newlines.png   the training split's histogram with its peak
    lines.csv      length, train, val: non-empty lines per length 1..analysis.max_separation
                   (length 0 row kept empty; longer lines counted in summary's overflow)
    paragraphs.csv length, train, val: paragraphs per length 1..PARAGRAPH_MAX
    lengths.png    the training split's line and paragraph lengths with their peaks
    summary.json   also, per split, the peak's contrast and the peak if it is sharp (line
                   structure, kernattn.tracks.char.analysis.newlines.sharp_peak), and "lines" and "paragraphs": count, peak, median, mean,
                   overflow (definitions: kernattn.tracks.char.analysis.newlines)
gpa-long found peaks at lag 1 and 69 in its corpus; on the Silesia Dickens mirror the main
peak above lag 1 is at 68 = the most frequent line length (67) + 1, while paragraphs have a
median of 184 characters: the newline peak is the line width of the hard-wrapped text.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ....config import params_from_args
from ..data import load_split, load_vocab
from ....io import atomic_dir
from ..stages import SUMMARY, corpus_dir
from . import newlines, plots

SPLITS = ("train", "val")
PARAGRAPH_MAX = 3000  # paragraph-length histogram range (characters); longer ones are overflow


def newline_id(data_dir) -> int:
    from ....errors import UsageError

    try:
        chars = load_vocab(data_dir)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{Path(data_dir) / 'vocab.json'}: unreadable ({exc}); run kernattn prepare") from None
    if "\n" not in chars:
        raise UsageError(f"{Path(data_dir) / 'vocab.json'}: the corpus has no newline character; the newline "
                         f"analyses (analyze-corpus, analyze-gpa) need a text with line breaks: use another data.corpus")
    return chars.index("\n")


def _load_ids(data_dir: Path, split: str) -> np.ndarray:
    from ....errors import UsageError

    try:
        return load_split(data_dir, split)
    except (OSError, ValueError) as exc:  # missing, or truncated / corrupt (numpy: ValueError)
        raise UsageError(f"{data_dir}: cannot read the {split} split ({exc}); run kernattn prepare") from None


def length_summary(lengths, max_len: int, paragraphs: bool) -> tuple[np.ndarray, dict]:
    """(histogram [max_len + 1] of the lengths >= 1, its summary: count, peak, median, mean, overflow)."""
    lengths = np.asarray(lengths)
    lengths = lengths[lengths > 0]
    counts, overflow = newlines.histogram(lengths, max_len)
    peak = (newlines.binned_peak(counts, newlines.PARAGRAPH_BIN) if paragraphs
            else newlines.main_peak(counts, min_lag=1))
    summary = {"count": int(lengths.size), "peak": peak, "overflow": overflow,
               "median": float(np.median(lengths)) if lengths.size else None,
               "mean": float(lengths.mean()) if lengths.size else None}
    if paragraphs:
        summary["peak_bin_width"] = newlines.PARAGRAPH_BIN
    return counts, summary


def _split_tables(ids, nl: int, max_sep: int) -> tuple[dict, dict]:
    """Histograms (newlines, lines, paragraphs) and the summary of one split."""
    seps = newlines.separations(ids, nl)
    counts, overflow = newlines.histogram(seps, max_sep)
    peak = newlines.main_peak(counts)
    lines, line_sum = length_summary(newlines.line_lengths(ids, nl), max_sep, paragraphs=False)
    paras, para_sum = length_summary(newlines.paragraph_lengths(ids, nl), PARAGRAPH_MAX, paragraphs=True)
    summary = {
        "chars": int(ids.size), "newlines": int(np.count_nonzero(np.asarray(ids) == nl)),
        "separations": int(seps.size), "peak": peak, "peak_count": int(counts[peak]) if peak else 0,
        "peak_contrast": newlines.peak_contrast(counts, peak), "sharp_peak": newlines.sharp_peak(counts),
        "lag1_count": int(counts[1]) if max_sep >= 1 else None, "overflow": overflow,
        "lines": line_sum, "paragraphs": para_sum,
    }
    return {"newlines": counts, "lines": lines, "paragraphs": paras}, summary


def analyze_corpus(params) -> Path:
    """Write the corpus folder; returns the path of its summary.json."""
    data_dir = Path(params.data.out_dir)
    nl = newline_id(data_dir)
    max_sep = params.analysis.max_separation
    tables = {"newlines": {"separation": np.arange(max_sep + 1)}, "lines": {"length": np.arange(max_sep + 1)},
              "paragraphs": {"length": np.arange(PARAGRAPH_MAX + 1)}}
    summary = {"newline_id": nl, "max_separation": max_sep, "paragraph_max": PARAGRAPH_MAX,
               "data_dir": str(data_dir), "splits": {}}
    for split in SPLITS:
        hists, summary["splits"][split] = _split_tables(_load_ids(data_dir, split), nl, max_sep)
        for name, counts in hists.items():
            tables[name][split] = counts
    out = corpus_dir(params)
    with atomic_dir(out) as tmp:
        for name, table in tables.items():
            pd.DataFrame(table).to_csv(tmp / f"{name}.csv", index=False)
        train = summary["splits"]["train"]
        what = f"({train['chars']:,} characters, scale {params.scale})"
        fig = plots.new_figure(7, 3.8)
        ax = fig.subplots()
        plots.draw_newline_histograms(ax, [("training corpus", tables["newlines"]["train"], train["peak"],
                                            "tab:blue")], min(max_sep, 200))
        ax.set_title(plots.wrap(f"Newline separations in the training corpus {what}"), fontsize=9)
        fig.savefig(tmp / "newlines.png", dpi=110)
        plots.length_histograms(tables["lines"]["train"], train["lines"], tables["paragraphs"]["train"],
                                train["paragraphs"], f"Line and paragraph lengths of the training corpus {what}"
                                ).savefig(tmp / "lengths.png", dpi=110)
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return out / SUMMARY


def run(args: argparse.Namespace) -> int:

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    path = analyze_corpus(params)
    s = json.loads(path.read_text())["splits"]["train"]
    print(f"kernattn analyze-corpus: {s['separations']:,} newline separations in the training split; "
          f"main peak above lag 1 at {s['peak']}; line lengths peak at {s['lines']['peak']}, paragraph "
          f"median {s['paragraphs']['median']}; wrote {path}")
    return 0
