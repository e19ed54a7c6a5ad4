"""The report's length-extrapolation part (the shape of every part: report/part.py): per track,
every row's validation loss at each multiple of its training context, over seeds, as a table
and a figure, read from results/<scale>/extrapolation/<track>.csv (extrapolate.py, main-DAG
stages extrapolate_char and extrapolate_lm). No claim of the four documents is about lengths
beyond training, so the part judges none: it describes.
"""

from __future__ import annotations

from pathlib import Path

from ...report.palette import PALETTE, row_colors
from ...report.part import ReportContext
from . import stages as paths
from ..report_common import ci_of

OUTLINE = ("part-extrapolation", "Length extrapolation: every run at 1x-8x its training context, not retrained", (
    ("extrapolation-char", "Char track"),
    ("extrapolation-lm", "Language model track")))
CLAIM_KINDS: dict = {}
TITLES = {"char": ("char GPT", "nats/char"), "lm": ("nanochat LM", "nats/token")}


def _cell(lines) -> dict:
    first = lines[0]
    defined = bool(first["defined"])
    # The CSV leaves a cell blank (NaN once read) where there is nothing to measure (the char
    # track's BPB, the loss beyond the training context at 1x): left out, not an error.
    ci = lambda col: ci_of([x[col] for x in lines], skip_nonfinite=True) if defined else None  # noqa: E731
    return {"factor": int(first["factor"]), "length": int(first["length"]), "defined": defined,
            "note": first["note"] if isinstance(first["note"], str) else "",
            "loss": ci("loss"), "beyond": ci("loss_beyond"), "bpb": ci("bpb")}


def track_context(table) -> dict:
    """{factors, context, rows: [{row, label, behaviour, seeds, cells: [per factor]}], check}
    from one track's CSV (a pandas frame)."""
    factors = sorted(int(f) for f in table["factor"].unique())
    rows = []
    for row, part in table.groupby("row", sort=False):
        records = part.to_dict("records")
        cells = [_cell([r for r in records if int(r["factor"]) == f]) for f in factors]
        rows.append({"row": row, "label": records[0]["label"], "behaviour": records[0]["behaviour"],
                     "seeds": sorted({int(r["seed"]) for r in records}), "cells": cells})
    ones = table[table["factor"] == 1]
    gap = (ones["val_loss_protocol"] - ones["val_loss_train"]).abs().max()
    return {"factors": factors, "context": int(table["train_context"].iloc[0]), "rows": rows,
            "check": float(gap), "has_bpb": bool(table["bpb"].notna().any())}


def figure(path: Path, track: str, ctx: dict, colors: dict[str, str], scale: str) -> None:
    """Two panels: the mean loss over every target, and over the targets beyond the training
    context, against the length (log 2); one line per row, markers where it is defined."""
    from ...figures import new_figure

    fig = new_figure(9.5, 3.6)
    axes = fig.subplots(1, 2)
    model, unit = TITLES[track]
    for key, ax, title in (("loss", axes[0], "every target"), ("beyond", axes[1], "targets beyond the training context")):
        for r in ctx["rows"]:
            pts = [(c["length"], c[key]["mean"]) for c in r["cells"] if c[key] is not None]
            if pts:
                ax.plot(*zip(*pts), "o-", color=colors.get(r["row"], "black"), label=r["row"], lw=1.2, ms=3)
        ax.set_xscale("log", base=2)
        ax.axvline(ctx["context"], color="0.6", ls=":", lw=1)
        ax.set_xlabel("sequence length (tokens)", fontsize=8)
        ax.set_ylabel(f"validation loss ({unit})", fontsize=8)
        ax.set_title(title, fontsize=8)
    axes[0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"{model}: trained at {ctx['context']}, scored at {', '.join(f'{f}x' for f in ctx['factors'])} "
                 f"[scale {scale}]; mean over seeds", fontsize=8)
    fig.savefig(path, dpi=100)


def _colors(params, track: str) -> dict[str, str]:
    if track == "char":
        return row_colors(params)
    return {r.name: PALETTE[i % len(PALETTE)] for i, r in enumerate(params.lm.rows)}


def section(ctx: ReportContext) -> dict:
    """Each track's context ({"present": False, ...} when its CSV is missing); figures and
    tables written."""
    import pandas as pd

    out = {}
    for track in paths.TRACKS:
        path = Path(paths.output(ctx.params, track))
        try:
            table = pd.read_csv(path)
        except (OSError, ValueError):
            out[track] = {"present": False, "path": str(path), "command": f"kernattn {paths.COMMAND[track]}"}
            continue
        part = {"present": True, "path": str(path), **track_context(table)}
        figure(ctx.assets / f"extrapolation-{track}.png", track, part, _colors(ctx.params, track), ctx.scale)
        part["figure"] = f"assets/extrapolation-{track}.png"
        flat_table(part).to_csv(ctx.tables / f"extrapolation-{track}.csv", index=False)
        out[track] = part
    return out


def flat_table(part: dict):
    """One line per row and factor: what the page's table shows."""
    import pandas as pd

    lines = []
    for r in part["rows"]:
        for c in r["cells"]:
            line = {"row": r["row"], "factor": c["factor"], "length": c["length"], "defined": c["defined"],
                    "note": c["note"], "seeds": len(r["seeds"])}
            for key in ("loss", "beyond", "bpb"):
                ci = c[key] or {}
                line |= {f"{key}_mean": ci.get("mean"), f"{key}_lo": ci.get("lo"), f"{key}_hi": ci.get("hi")}
            lines.append(line)
    return pd.DataFrame(lines)


def claims(ctx: ReportContext, section: dict) -> list:
    return []
