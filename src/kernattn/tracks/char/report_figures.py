"""The char track's figures in the report: validation curves (the papers' Figure 2 panels of
paper_numbers.yaml `figures`, and every row) and the final validation loss with its interval,
one colour per matrix row in every figure (report.palette)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from ...config import Params
from ...figures import new_figure
from ...report.palette import row_colors
from .report_runs import Run, curves


def _draw_curves(ax, runs, rows_colors: dict[str, str | None], labels: dict[str, str]) -> int:
    drawn = 0
    for row, color in rows_colors.items():
        c = curves(runs, row)
        if c is None:
            continue
        n = int(c["n"].max())
        # a marker on every evaluated step: how many points the curve rests on shows
        line, = ax.plot(c.index, c["mean"], color=color, lw=1.6, marker="o", ms=2.5,
                        label=f"{labels.get(row, row)} (n={n})")
        if n > 1:
            ax.fill_between(c.index, c["min"], c["max"], color=line.get_color(), alpha=0.2, lw=0)
        drawn += 1
    ax.set_xlabel("step")
    ax.set_ylabel("validation MCE (nats/char)")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return drawn


def plot_figures(assets: Path, params: Params, papers: dict, runs: list[Run], main_df: pd.DataFrame) -> list[dict]:
    """Writes the PNGs; returns [{file, title, caption}] for the page."""
    labels = {r.spec.row: r.spec.label for r in runs}
    present = [r.name for r in params.matrix.rows if r.name in labels]
    colours = row_colors(params)  # one colour per row in every figure
    figures = []
    shade = "shaded: min-max over seeds"

    panels = [f for f in papers.get("figures", []) if any(row in labels for row in f["rows"])]
    if panels:
        fig = new_figure(5.5 * len(panels), 4.2)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, spec in zip(axes, panels):
            _draw_curves(ax, runs, {row: colours[row] for row in spec["rows"] if row in labels}, labels)
            ax.set_title(textwrap.fill(spec["title"] + f" [scale {params.scale}]", 62), fontsize=9)
        fig.savefig(assets / "val_curves_papers.png", dpi=110)
        missing = {f["id"]: [r for r in f["rows"] if r not in labels] for f in panels}
        miss_txt = "; ".join(f"{k}: {', '.join(v)} not run" for k, v in missing.items() if v)
        figures.append({"file": "assets/val_curves_papers.png",
                        "title": "The papers' Figure 2, redrawn from our runs",
                        "caption": "Validation mean cross-entropy vs training step, mean over seeds "
                                   f"({shade}), in the report's colour for each row (the same in every "
                                   "figure; the papers' own colours differ between 000 and 001). " + (miss_txt + "." if miss_txt else "")})

    fig = new_figure(8, 4.8)
    ax = fig.subplots()
    _draw_curves(ax, runs, {row: colours[row] for row in present}, labels)
    ax.set_title(f"All rows of the matrix [scale {params.scale}]", fontsize=10)
    fig.savefig(assets / "val_curves_all.png", dpi=110)
    figures.append({"file": "assets/val_curves_all.png", "title": "Every row",
                    "caption": f"Validation mean cross-entropy vs step, mean over seeds ({shade})."})

    fig = new_figure(8, 0.9 + 0.38 * len(main_df))
    ax = fig.subplots()
    ys = list(range(len(main_df)))[::-1]
    for y, (_, r) in zip(ys, main_df.iterrows()):
        err = None if pd.isna(r["val_mce_ci_half"]) else [[r["val_mce_ci_half"]], [r["val_mce_ci_half"]]]
        ax.errorbar([r["val_mce_mean"]], [y], xerr=err, fmt="o", color=colours[r["row"]], capsize=3)
        seeds = runs_values(runs, r["row"])
        ax.plot(seeds, [y] * len(seeds), "x", color="tab:gray", ms=5)
    ax.set_yticks(ys)
    ax.set_yticklabels(main_df["label"], fontsize=8)
    ax.set_xlabel("final validation MCE (nats/char)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"Final validation MCE: mean ± 95% CI (x: seeds) [scale {params.scale}]", fontsize=10)
    fig.savefig(assets / "val_mce_ci.png", dpi=110)
    figures.append({"file": "assets/val_mce_ci.png", "title": "Final validation loss with intervals",
                    "caption": "Dot: mean over seeds; bar: 95% Student t interval (none for one seed); "
                               "crosses: the seeds."})
    return figures


def runs_values(runs: list[Run], row: str) -> list[float]:
    return [float(r.final["val_loss"]) for r in runs if r.spec.row == row]
