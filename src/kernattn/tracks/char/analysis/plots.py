"""Figures of the GPA analyses (matplotlib, Agg): used by `kernattn analyze-gpa` and the report."""

from __future__ import annotations

import textwrap

import numpy as np

from ....figures import new_figure  # noqa: F401 (the analyses' figures come from here)

LAG_LABEL = "lag |n - i| (characters)"


def wrap(title: str, width: int = 72) -> str:
    return textwrap.fill(title, width)


def _mark_bump(ax, bump, color) -> None:
    if bump is not None:
        ax.axvline(bump["lag"], color=color, ls=":", lw=1)
        ax.plot([bump["lag"]], [bump["height"]], "o", color=color, ms=4)


def draw_banks(ax, shapes, label_prefix: str = "head ", bumps=None) -> None:
    """shapes [heads, lags] on one axis, one colour per head; bumps: per head a dict or None."""
    lags = np.arange(shapes.shape[-1])
    for h, g in enumerate(shapes):
        line, = ax.plot(lags, g, lw=1.3, label=f"{label_prefix}{h + 1}")
        if bumps is not None:
            _mark_bump(ax, bumps[h], line.get_color())
    ax.set_xlabel(LAG_LABEL)
    ax.set_ylabel("G(lag)")
    ax.grid(alpha=0.3)


def bank_grid(shapes, title: str, bumps=None):
    """gpa-long Figure 4: one panel per layer x head. shapes [L, H, lags]; bumps [L][H] or None."""
    n_layer, n_head = shapes.shape[:2]
    fig = new_figure(2.6 * n_head + 0.6, 2.1 * n_layer + 0.7)
    axes = fig.subplots(n_layer, n_head, squeeze=False, sharex=True)
    lags = np.arange(shapes.shape[-1])
    for layer in range(n_layer):
        for head in range(n_head):
            ax = axes[layer][head]
            ax.plot(lags, shapes[layer, head], color="tab:blue", lw=1.3)
            if bumps is not None:
                _mark_bump(ax, bumps[layer][head], "tab:red")
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
            if layer == n_layer - 1:
                ax.set_xlabel(LAG_LABEL, fontsize=7)
            if head == 0:
                ax.set_ylabel("G(lag)", fontsize=8)
    fig.suptitle(textwrap.fill(title, int(14 * n_head + 10)), fontsize=10)
    return fig


def bank_init(shapes, title: str):
    """gpa-long Figure 3: the bank(s) at initialisation, overlaid (identical for every head
    and layer under the default init, which the legend says)."""
    flat = shapes.reshape(-1, shapes.shape[-1])
    same = bool(np.allclose(flat, flat[0]))
    fig = new_figure(6, 3.8)
    ax = fig.subplots()
    if same:
        ax.plot(np.arange(flat.shape[-1]), flat[0], color="tab:blue", lw=1.5,
                label=f"all {len(flat)} banks (identical at initialisation)")
    else:
        for i, g in enumerate(flat):
            ax.plot(np.arange(g.size), g, lw=1, label=f"layer {i // shapes.shape[1] + 1}, head {i % shapes.shape[1] + 1}")
    ax.set_xlabel(LAG_LABEL)
    ax.set_ylabel("G(lag)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(wrap(title), fontsize=9)
    return fig


def draw_newline_histograms(ax, series, max_lag: int, paper_peak: int | None = None) -> None:
    """series: [(label, counts [>= max_lag + 1], peak or None, colour)], drawn as fractions
    of all separations <= max_lag, with each peak marked; the paper's peak as a grey band."""
    lags = np.arange(max_lag + 1)
    for label, counts, peak, color in series:
        c = np.asarray(counts[: max_lag + 1], dtype=float)
        total = c.sum()
        if total <= 0:
            continue
        ax.plot(lags, c / total, lw=1.2, color=color, label=label + (f" (peak {peak})" if peak is not None else ""),
                drawstyle="steps-mid")
        if peak is not None and peak <= max_lag:
            ax.axvline(peak, color=color, ls=":", lw=1)
    if paper_peak is not None:
        ax.axvspan(paper_peak - 0.5, paper_peak + 0.5, color="0.6", alpha=0.35, lw=0,
                   label=f"paper: lag {paper_peak}")
    ax.set_xlabel("separation between consecutive newlines (characters)")
    ax.set_ylabel("fraction of separations")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _draw_lengths(ax, counts, summary: dict, xlabel: str, color: str, bin_width: int = 1) -> None:
    c = np.asarray(counts, dtype=float)[1:]
    if bin_width > 1:  # paragraphs: bins, as their peak is read (kernattn.tracks.char.analysis.newlines)
        n_bins = -(-c.size // bin_width)
        c = np.pad(c, (0, n_bins * bin_width - c.size)).reshape(n_bins, bin_width).sum(1)
    x = 1 + np.arange(c.size) * bin_width + (bin_width - 1) / 2
    if c.sum() > 0:
        ax.plot(x, c / c.sum(), color=color, lw=1.2, drawstyle="steps-mid")
        # show 99.5% of the lengths: the long tail would squeeze the peak into a line
        last = int(np.searchsorted(np.cumsum(c) / c.sum(), 0.995))
        ax.set_xlim(0, 1.1 * x[min(last, x.size - 1)] + bin_width)
    for key, ls in (("peak", ":"), ("median", "--")):
        if summary.get(key) is not None:
            ax.axvline(summary[key], color="k", ls=ls, lw=1, label=f"{key} {summary[key]:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction" + (f" per {bin_width}-character bin" if bin_width > 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def length_histograms(line_counts, line_summary: dict, para_counts, para_summary: dict, title: str):
    """Two panels: non-empty line lengths and paragraph lengths, each with its peak and median."""
    fig = new_figure(10, 3.8)
    left, right = fig.subplots(1, 2)
    _draw_lengths(left, line_counts, line_summary, "line length (characters, newline excluded)", "tab:blue")
    _draw_lengths(right, para_counts, para_summary, "paragraph length (characters)", "tab:green",
                  para_summary.get("peak_bin_width", 1))
    fig.suptitle(wrap(title, 110), fontsize=9)
    return fig
