"""Histograms of the separations between newlines (gpa-long, 3.2 and Figure 5b).

The separation of two consecutive newlines at positions p < q is q - p: two newlines in a
row (a paragraph break) have separation 1, a line of 68 characters between two newlines has
separation 69. Histograms are counts per separation 0..max_sep (index = separation; 0 is
always empty), with separations above max_sep counted apart (`overflow`).

The main peak "above lag 1" is the separation >= 2 with the largest count (the smallest such
separation on a tie): gpa-long reads lag 1 as the paragraph breaks and the next peak as the
typical line / paragraph length (69 in its corpus, 70 in its generated text).

Generated text comes as several independent streams: separations are counted within each
stream only (never across two streams, never into the prompt), and the interval of the peak
is a bootstrap over streams (resample the streams with replacement, take the peak of the
summed histogram; 2.5 and 97.5 percentiles). Streams of 1,000 characters cut off long
separations: a separation s fits into a stream (1000 - s) / 1000 of the time, a weight that
changes by 0.1% per lag near 70, too little to move the peak.

Lines and paragraphs (issue 17: is the peak the line width or the paragraph length?):
- a line is the text between two consecutive newlines (or the sequence's ends); its length
  excludes the newline, so a line of length n gives a separation n + 1. Empty lines are the
  paragraph breaks and are left out of the line-length histogram.
- a paragraph is a maximal run of non-empty lines (blank-line separated); its length counts
  its characters and its inner newlines, not the break after it.
- the line-length peak is the most frequent length >= 1; paragraph lengths are long-tailed,
  so their 1-character mode is noise: their peak is the most populated bin of
  PARAGRAPH_BIN characters (its centre), reported beside the median.
"""

from __future__ import annotations

import numpy as np

PEAK_MIN_LAG = 2  # "the main peak above lag 1"
PARAGRAPH_BIN = 10  # characters per bin for the paragraph-length peak
# A peak at least this many times the mean count over lags min_lag..max is line structure:
# 27 and 31 on the mirror as it is and rewrapped at 50, 1.9 on the unwrapped mirror.
SHARP_CONTRAST = 5.0


def separations(ids, newline_id: int) -> np.ndarray:
    """Separations between consecutive newlines of one token sequence (int64)."""
    pos = np.flatnonzero(np.asarray(ids) == newline_id)
    return np.diff(pos)


def histogram(seps, max_sep: int) -> tuple[np.ndarray, int]:
    """(counts [max_sep + 1] indexed by separation, number of separations > max_sep)."""
    seps = np.asarray(seps, dtype=np.int64)
    inside = seps[seps <= max_sep]
    return np.bincount(inside, minlength=max_sep + 1).astype(np.int64), int((seps > max_sep).sum())


def main_peak(counts, min_lag: int = PEAK_MIN_LAG) -> int | None:
    """The separation >= min_lag with the most counts; None if there is none."""
    counts = np.asarray(counts)
    tail = counts[min_lag:]
    if tail.size == 0 or tail.max() <= 0:
        return None
    return int(np.argmax(tail)) + min_lag


def peak_contrast(counts, peak: int | None, min_lag: int = PEAK_MIN_LAG) -> float | None:
    """Count at `peak` over the mean count of lags min_lag..max: how much the peak stands out."""
    counts = np.asarray(counts, dtype=np.float64)
    if peak is None or counts[min_lag:].sum() <= 0:
        return None
    return float(counts[peak] / counts[min_lag:].mean())


def sharp_peak(counts, min_lag: int = PEAK_MIN_LAG, contrast: float = SHARP_CONTRAST) -> int | None:
    """The main peak if it stands out (contrast >= `contrast`: line structure), else None."""
    peak = main_peak(counts, min_lag)
    c = peak_contrast(counts, peak, min_lag)
    return peak if c is not None and c >= contrast else None


def stream_histograms(streams, newline_id: int, max_sep: int) -> tuple[np.ndarray, int]:
    """Per-stream histograms [S, max_sep + 1] of token streams [S, T], and the total overflow."""
    rows, overflow = [], 0
    for ids in np.asarray(streams):
        counts, over = histogram(separations(ids, newline_id), max_sep)
        rows.append(counts)
        overflow += over
    return np.stack(rows), overflow


def bootstrap_peak(per_stream, n_boot: int, seed: int, min_lag: int = PEAK_MIN_LAG,
                   level: float = 0.95) -> tuple[int, int] | None:
    """Percentile interval of the main peak, resampling streams [S, max_sep + 1] with replacement."""
    per_stream = np.asarray(per_stream, dtype=np.float64)
    n_streams = per_stream.shape[0]
    if n_streams == 0 or per_stream[:, min_lag:].sum() == 0:
        return None
    rng = np.random.default_rng(seed)
    # draw[b, s]: how often stream s is taken in resample b; summed histograms by one matmul
    draw = np.stack([np.bincount(rng.integers(0, n_streams, n_streams), minlength=n_streams)
                     for _ in range(n_boot)])
    sums = draw @ per_stream
    sums[:, :min_lag] = -1  # a resample without any separation >= min_lag picks min_lag (all zero)
    peaks = np.argmax(sums, axis=1)
    lo, hi = np.percentile(peaks, [100 * (1 - level) / 2, 100 * (1 + level) / 2], method="nearest")
    return int(lo), int(hi)


def line_lengths(ids, newline_id: int) -> np.ndarray:
    """Lengths of every line of one token sequence, empty lines included (int64)."""
    ids = np.asarray(ids)
    bounds = np.concatenate(([-1], np.flatnonzero(ids == newline_id), [ids.size]))
    return np.diff(bounds) - 1


def paragraph_lengths(ids, newline_id: int) -> np.ndarray:
    """Lengths of the paragraphs (maximal runs of non-empty lines) of one token sequence."""
    lens = line_lengths(ids, newline_id)
    full = lens > 0
    # consecutive non-empty lines share the running count of empty lines before them
    group = np.cumsum(~full)[full]
    if group.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, run = np.unique(group, return_inverse=True)
    chars = np.bincount(run, weights=lens[full]).astype(np.int64)
    n_lines = np.bincount(run)
    return chars + n_lines - 1


def binned_peak(counts, bin_width: int) -> float | None:
    """Centre of the most populated bin of `bin_width` consecutive lengths (1, 2, ... first
    bin 1..bin_width; length 0 is left out); None when there is no count."""
    counts = np.asarray(counts)[1:]
    if counts.sum() <= 0:
        return None
    n_bins = -(-counts.size // bin_width)
    padded = np.zeros(n_bins * bin_width, dtype=np.float64)
    padded[: counts.size] = counts
    best = int(np.argmax(padded.reshape(n_bins, bin_width).sum(1)))
    return 1 + best * bin_width + (bin_width - 1) / 2
