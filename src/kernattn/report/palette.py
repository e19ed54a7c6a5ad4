"""One colour per row of the experiment matrix, the same in every figure of the report.

Colours follow the row's position in params.yaml's matrix.rows (all rows, not only those a
scale trains), so a row keeps its colour from scale to scale and from figure to figure.
"""

from __future__ import annotations

# tab10, then fourteen further colours far from them and from each other (matplotlib names):
# one each for the 22 rows of matrix.rows (the documents', the reviewers' and the controls').
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
           "tab:olive", "tab:cyan", "black", "gold", "navy", "lime", "teal", "magenta", "maroon", "darkkhaki",
           "coral", "darkviolet", "yellowgreen", "steelblue", "sienna", "orchid")


def row_colors(params) -> dict[str, str]:
    """row name -> colour; rows beyond the palette reuse it (a warning-free fallback)."""
    return {r.name: PALETTE[i % len(PALETTE)] for i, r in enumerate(params.matrix.rows)}
