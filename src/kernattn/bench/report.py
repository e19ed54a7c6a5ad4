"""The report's benchmark part (the shape of every part: report/part.py): the attention
kernels (bench_attention.py) and the whole models, a GKA paper Table 4 analogue and the LM
tables; it judges Table 4's claim (bench_table4.py: GKA-Ti slower and more memory-hungry than
DeiT-Ti at the paper's shape, on a GPU measurement); the ratio targets are judged by the
benchmark itself, on GPU only.

Reads `kernattn bench`'s models.csv (and models_ratios.csv) from this scale's bench.out_dir
and from every folder under results/gpu/ (GPU measurements committed with the device named;
the pipeline never writes there). ViT models are named <variant>_<size> (deit_tiny, gka_tiny,
vlt_tiny, ...); each size gets its DeiT, GKA and VLT rows and the change of each against DeiT,
beside the paper's change (bench/paper_bench.yaml).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

from ..report.claims import ClaimResult
from ..report.part import ClaimKind, ReportContext
from ..yaml_text import safe_load
from . import report_attention as bench_attention, report_ddp as bench_ddp, report_table4 as bench_table4
from .report_table4 import PAPER_SHAPE

OUTLINE = ("part-bench", "Benchmarks", (
    ("bench", "Attention kernels: speed and memory"),
    ("bench-models", "Whole models: throughput, memory and MFU (GKA paper Table 4)")))
CLAIM_KINDS = {"bench_table4": ClaimKind("bench-models", ("rule",)),
               "bench_table4_trend": ClaimKind("bench-models", ("rule",))}
GPU_DIR = Path("results/gpu")
CSV_NAME, RATIOS_NAME = "models.csv", "models_ratios.csv"


def paper_table4() -> dict:
    return safe_load(resources.files(__package__).joinpath("paper_bench.yaml").read_text())


def sources(params) -> list[tuple[str, Path]]:
    """(label, folder) of every models.csv to show: this scale's run first, then the GPU ones."""
    found = [(f"this scale ({params.scale})", Path(params.bench.out_dir))]
    if GPU_DIR.is_dir():
        found += [(f"GPU: {p.parent.name}", p.parent) for p in sorted(GPU_DIR.glob(f"*/{CSV_NAME}"))]
    return [(label, d) for label, d in found if (d / CSV_NAME).is_file()]


def _pct(a: float, b: float) -> str:
    return "—" if not b or a != a or b != b else f"{100 * (a / b - 1):+.0f}%"


def _paper_shape(vit: pd.DataFrame, model: str) -> bool:
    return str(vit.loc[vit["model"] == model, "shape"].iloc[0]).startswith(PAPER_SHAPE)


def vit_table(df: pd.DataFrame, paper: dict) -> pd.DataFrame | None:
    """Table 4's layout: inference at the best batch (batch in brackets) and its memory, then
    training throughput and memory at each training batch; a Δ row per non-DeiT model."""
    vit = df[(df["family"] == "vit") & (df["status"] == "ok")]
    if vit.empty:
        return None
    train_batches = sorted(vit.loc[vit["mode"] == "train", "batch"].unique())
    records = []
    # the paper's shape (224 px) leads: a CPU's small shapes are dominated by per-call overhead
    models = sorted(dict.fromkeys(vit["model"]), key=lambda m: not _paper_shape(vit, m))
    for model in models:
        variant, _, size = model.partition("_")
        rows = vit[vit["model"] == model]
        inf = rows[rows["mode"] == "infer"]
        rec = {"model": model, "size": size, "shape": rows["shape"].iloc[0], "variant": variant}
        if not inf.empty:
            best = inf.loc[inf["items_per_s"].idxmax()]
            rec["infer img/s (batch)"] = f"{best['items_per_s']:,.0f} ({best['batch']})"
            rec["_infer"], rec["infer MiB"] = best["items_per_s"], best["peak_mib"]
        for b in train_batches:
            t = rows[(rows["mode"] == "train") & (rows["batch"] == b)]
            if not t.empty:
                rec[f"train b{b} img/s"], rec[f"train b{b} MiB"] = t["items_per_s"].iloc[0], t["peak_mib"].iloc[0]
        records.append(rec)
    out = []
    by_model = {r["model"]: r for r in records}
    for rec in records:
        out.append({k: v for k, v in rec.items() if not k.startswith("_")})
        base = by_model.get(f"deit_{rec['size']}")
        if rec["variant"] == "deit" or base is None:
            continue
        delta = {"model": f"Δ {rec['variant']} vs deit", "size": rec["size"], "shape": rec["shape"], "variant": "ours"}
        delta["infer img/s (batch)"] = _pct(rec.get("_infer", float("nan")), base.get("_infer", float("nan")))
        delta["infer MiB"] = _pct(rec.get("infer MiB", float("nan")), base.get("infer MiB", float("nan")))
        for b in train_batches:
            for k in (f"train b{b} img/s", f"train b{b} MiB"):
                delta[k] = _pct(rec.get(k, float("nan")), base.get(k, float("nan")))
        out.append(delta)
        ref = paper.get("vit", {}).get(rec["size"], {})
        if rec["variant"] == "gka" and ref:
            g, d = ref["gka"], ref["deit"]
            paper_row = {"model": "Δ gka vs deit (paper)", "size": rec["size"], "shape": rec["shape"], "variant": "paper",
                         "infer img/s (batch)": _pct(g["infer"], d["infer"]), "infer MiB": _pct(g["infer_mem"], d["infer_mem"])}
            for b in train_batches:
                if f"train{b}" in g:
                    paper_row[f"train b{b} img/s"] = _pct(g[f"train{b}"], d[f"train{b}"])
                    paper_row[f"train b{b} MiB"] = _pct(g[f"train{b}_mem"], d[f"train{b}_mem"])
            out.append(paper_row)
    return pd.DataFrame(out).fillna("—")


def lm_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Training tokens/s, peak memory and MFU of the char GPT and LM rows, with the ratio of
    tokens/s to the family's baseline measured in the same run."""
    lm = df[df["family"].isin(["char_gpt", "lm"]) & (df["mode"] == "train")]
    if lm.empty:
        return None
    speed = {(r.model, r.batch): r.items_per_s for r in lm.itertuples()}
    rows = []
    for r in lm.itertuples():
        base = speed.get((r.baseline, r.batch)) if isinstance(r.baseline, str) and r.baseline else None
        rows.append({"family": r.family, "model": r.model, "variant": r.variant, "shape": r.shape,
                     "batch": r.batch, "tokens/s": r.items_per_s, "vs baseline": r.items_per_s / base if base else None,
                     "peak MiB": r.peak_mib, "MFU": r.mfu, "dtype": r.dtype, "compile": r.compile, "status": r.status})
    return pd.DataFrame(rows)


def _html(df: pd.DataFrame) -> str:
    return df.to_html(index=False, border=0, classes="num-table", na_rep="—",
                      float_format=lambda x: f"{x:,.3f}" if abs(x) < 10 else f"{x:,.0f}")


def section(ctx: ReportContext) -> dict:
    """Context for templates/bench_models.html.j2; writes each table as tables/*.csv."""
    attention = bench_attention.tables(ctx.bench_dirs)
    for b in attention:
        for name, df in b["csv"].items():
            df.to_csv(ctx.tables / name)
    return {"attention": attention, **_models(ctx.folder, ctx.params)}


def claims(ctx: ReportContext, section: dict) -> list[ClaimResult]:
    """Table 4's runtime claim at the Tiny size, and its trend across sizes and batches."""
    judge = {"bench_table4": bench_table4.judge, "bench_table4_trend": bench_table4.table4_trend_claim}
    return [judge[c["kind"]](c, section["measured"], paper_table4(), ctx.scale) for c in ctx.claims_of(CLAIM_KINDS)]


def _models(folder: Path, params) -> dict:
    """The whole models' tables of every models.csv found."""
    paper = paper_table4()
    entries, measured = [], []
    for label, d in sources(params):
        df = pd.read_csv(d / CSV_NAME)
        measured.append((label, df))
        slug = "scale" if label.startswith("this scale") else d.name
        info = {k: ", ".join(str(v) for v in dict.fromkeys(df[k].dropna())) for k in ("device", "dtype", "torch", "compile")}
        entry = {"label": label, "path": str(d / CSV_NAME), "info": info, "tables": []}
        for title, table, name in (("Table 4 analogue: ViT throughput and peak memory", vit_table(df, paper), "vit"),
                                   ("language models: training throughput, memory and MFU", lm_table(df), "lm")):
            if table is not None:
                table.to_csv(folder / "tables" / f"bench-models-{slug}-{name}.csv", index=False)
                entry["tables"].append({"title": title, "html": _html(table)})
        ratios_path = d / RATIOS_NAME
        if ratios_path.is_file():
            ratios = pd.read_csv(ratios_path, keep_default_na=False, na_values=[""])
            if not ratios.empty:
                ratios.to_csv(folder / "tables" / f"bench-models-{slug}-ratios.csv", index=False)
                show = ratios[["family", "model", "baseline", "mode", "batch", "metric", "ratio", "target", "met"]]
                entry["tables"].append({"title": "ratios against the baseline (targets judged on GPU only)",
                                        "html": _html(show)})
        ddp = bench_ddp.device_table(d, paper)  # gpu-check --part vit_ddp: every GPU of the node
        if ddp is not None:
            ddp.to_csv(folder / "tables" / f"bench-models-{slug}-vit-ddp.csv", index=False)
            entry["tables"].append({"title": "Table 4's training columns: ViTs under DDP on every GPU of the node",
                                    "html": _html(ddp)})
        entries.append(entry)
    return {"entries": entries, "measured": measured, "paper_source": paper.get("source", ""),
            "command": f"kernattn bench --scale {params.scale}"}
