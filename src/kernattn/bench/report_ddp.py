"""The report's reader of gpu-check's vit_ddp.csv (bench/ddp_vit.py): ViT training under DDP
on every GPU of a node, the setting of the training columns of gka-paper's Table 4 ("Training
uses DDP across 7 GPUs at the indicated per-GPU batch size (BF16)", on 7x RTX 5090), to sit
beside the bench part's (bench/report.py) single-GPU inference.

    table = ddp_table(Path("results/gpu"), paper)       # every device; None when none has the file
    table = device_table(Path("results/gpu/<device>"), paper)   # one device folder

One row per device, model and per-GPU batch: ranks, img/s per GPU and in total, the largest
rank's peak memory, the total against DeiT's of the same size at the same batch, and the
paper's total and its change against DeiT (bench/paper_bench.yaml, whose training numbers
are totals over its 7 GPUs).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .ddp_vit import SCHEMA
from .typed_csv import read_rows

CSV_NAME = "vit_ddp.csv"
PAPER_GPUS = 7  # gka-paper, Table 4's caption


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "—"


def _paper_total(paper: dict, model: str, batch: int) -> float | None:
    variant, _, size = model.partition("_")
    return paper.get("vit", {}).get(size, {}).get(variant, {}).get(f"train{batch}")


def device_rows(rows: list[dict], device: str, paper: dict) -> list[dict]:
    """The table's rows of one device's CSV (every rank's rows of a model and batch in one)."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["batch"]), []).append(r)
    total = {key: group[0]["items_per_s_total"] for key, group in groups.items()}
    out = []
    for (model, batch), group in groups.items():
        first = group[0]
        base = first["baseline"]
        mine_paper, base_paper = _paper_total(paper, model, batch), _paper_total(paper, base, batch)
        out.append({"device": device, "model": model, "shape": first["shape"], "batch per GPU": batch,
                    "ranks": f"{first['ranks']} ({first['backend']})",
                    "img/s per GPU": total[(model, batch)] / first["ranks"], "img/s total": total[(model, batch)],
                    "vs deit": _ratio(total[(model, batch)], total.get((base, batch))) if base else "—",
                    "peak MiB (max rank)": max(r["peak_mib"] for r in group),
                    f"paper img/s total ({PAPER_GPUS} GPUs)": mine_paper if mine_paper is not None else "—",
                    "paper vs deit": _ratio(mine_paper, base_paper) if base else "—",
                    "ranks in sync": all(r["in_sync"] for r in group)})
    return out


def device_table(folder: Path, paper: dict) -> pd.DataFrame | None:
    """One device folder's table (results/gpu/<device>/vit_ddp.csv), or None without the file:
    what bench/report.py adds to that folder's entry, beside its single-GPU rows."""
    path = Path(folder) / CSV_NAME
    return pd.DataFrame(device_rows(read_rows(path, SCHEMA), path.parent.name, paper)) if path.is_file() else None


def ddp_table(gpu_dir: Path, paper: dict) -> pd.DataFrame | None:
    """Every results/gpu/<device>/vit_ddp.csv in one table, or None when there is none."""
    tables = [device_table(path.parent, paper) for path in sorted(Path(gpu_dir).glob(f"*/{CSV_NAME}"))]
    return pd.concat(tables, ignore_index=True) if tables else None
