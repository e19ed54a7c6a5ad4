"""gka-paper's Table 4 as a claim (issue 25): "in our current implementation, [GKA] is
consistently slower and more memory-intensive" than DeiT, read at Ti and the paper's shape.

From a models.csv of `kernattn bench` (the `vit_paper` family: deit_tiny and gka_tiny at
224 px / patch 16), the ratios GKA-Ti / DeiT-Ti of inference throughput (each at its best
batch, as Table 4) and of training throughput and peak memory at every training batch
measured, with the paper's ratios beside (paper_bench.yaml). The rule, fixed in
paper_numbers.yaml before the measurements (the claim's `rule`): reproduced when every
throughput ratio (inference and training) is below 1 and every training memory ratio above 1;
contradicted when every throughput ratio is at least 1 and every training memory ratio at
most 1; inconclusive otherwise. Judged on a GPU measurement only (the paper's are RTX 5090
GPUs, where fused attention decides the gap): a CPU's measurement is "not comparable", its
ratios shown. Benchmarks have no seeds: a measurement is the median of its timed steps.
"""

from __future__ import annotations

import pandas as pd

from ..report import verdicts
from ..report.claims import ClaimResult
from .peaks import kind_for_name

PAPER_SHAPE = "224px/16"   # bench.cases' shape label of the paper's ViTs
PAIR = ("gka_tiny", "deit_tiny")


def ratios(df: pd.DataFrame) -> dict[str, float] | None:
    """{"infer img/s": r, "train b<B> img/s": r, "train b<B> MiB": r, ...} of GKA-Ti over
    DeiT-Ti at the paper's shape; None when either model was not measured there."""
    vit = df[(df["family"] == "vit") & (df["status"] == "ok") & df["shape"].astype(str).str.startswith(PAPER_SHAPE)]
    got = {m: vit[vit["model"] == m] for m in PAIR}
    if any(g.empty for g in got.values()):
        return None
    out = {}
    infer = {m: g.loc[g["mode"] == "infer", "items_per_s"] for m, g in got.items()}
    if all(len(v) for v in infer.values()):
        out["infer img/s"] = float(infer[PAIR[0]].max() / infer[PAIR[1]].max())
    train = {m: g[g["mode"] == "train"].set_index("batch") for m, g in got.items()}
    for b in sorted(set(train[PAIR[0]].index) & set(train[PAIR[1]].index)):
        g, d = train[PAIR[0]].loc[b], train[PAIR[1]].loc[b]
        out[f"train b{b} img/s"] = float(g["items_per_s"] / d["items_per_s"])
        out[f"train b{b} MiB"] = float(g["peak_mib"] / d["peak_mib"])
    return out


def paper_ratios(paper: dict) -> dict[str, float]:
    """Table 4's GKA-Ti / DeiT-Ti ratios, named as `ratios` names ours."""
    g, d = paper["vit"]["tiny"]["gka"], paper["vit"]["tiny"]["deit"]
    out = {"infer img/s": g["infer"] / d["infer"]}
    for b in (64, 128):
        out[f"train b{b} img/s"] = g[f"train{b}"] / d[f"train{b}"]
        out[f"train b{b} MiB"] = g[f"train{b}_mem"] / d[f"train{b}_mem"]
    return out


def direction(r: dict[str, float]) -> str:
    """The rule of the module docstring on one measurement's ratios."""
    speed = [v for k, v in r.items() if k.endswith("img/s")]
    memory = [v for k, v in r.items() if k.startswith("train") and k.endswith("MiB")]
    if not speed or not memory:
        return verdicts.INCONCLUSIVE
    if all(v < 1 for v in speed) and all(v > 1 for v in memory):
        return verdicts.REPRODUCED
    if all(v >= 1 for v in speed) and all(v <= 1 for v in memory):
        return verdicts.CONTRADICTED
    return verdicts.INCONCLUSIVE


def is_gpu(df: pd.DataFrame) -> bool:
    """A GPU measurement: a device bench/peaks.yaml knows, or an MFU (measured on GPU only)."""
    devices = [str(d) for d in df.get("device", pd.Series(dtype=str)).dropna()]
    return any(kind_for_name(d) is not None for d in devices) or bool(df.get("mfu", pd.Series(dtype=float)).notna().any())


def _text(r: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}x" for k, v in r.items())


def judge(claim: dict, measured: list[tuple[str, pd.DataFrame]], paper: dict, scale: str) -> ClaimResult:
    """The claim on the first GPU measurement among `measured` ((label, models.csv) in the
    report's order), else on the first one at all (a CPU: not comparable)."""
    found = [(label, df, r) for label, df in measured if (r := ratios(df)) is not None]
    beside = f"paper (RTX 5090): {_text(paper_ratios(paper))}"
    if not found:
        return ClaimResult(claim, verdicts.NOT_RUN, scale=scale, ours="—",
                           detail=f"no models.csv with deit_tiny and gka_tiny at {PAPER_SHAPE} "
                                  f"(bench.families needs vit_paper); {beside}")
    label, df, r = next((x for x in found if is_gpu(x[1])), found[0])
    device = ", ".join(dict.fromkeys(str(d) for d in df.get("device", pd.Series(dtype=str)).dropna())) or "unknown"
    verdict = direction(r) if is_gpu(df) else verdicts.not_comparable(
        f"measured on a CPU ({device}); the paper measured RTX 5090 GPUs, where fused attention kernels decide the gap")
    train_speed = [v for k, v in r.items() if k.startswith("train") and k.endswith("img/s")]  # smallest batch first
    speed = train_speed[0] if train_speed else None
    return ClaimResult(claim, verdict, scale=scale, ours=f"GKA-Ti / DeiT-Ti: {_text(r)} ({label})", estimate=speed,
                       detail=f"{beside}; ours on {device}; {claim.get('rule', '')}".rstrip("; "))


# ----------------------------------------------------------------------------- Table 4 across sizes
# What Table 4 reports across sizes, as GKA / DeiT throughput ratios: inference 0.88 (Ti), 0.97 (S),
# 0.54 (B); training b64 0.62, 0.65, 0.50; b128 0.59, 0.37, 0.42. The penalty is larger at Base
# than at Tiny in every mode, but Small breaks a monotone trend (inference and b64 are closer to
# DeiT at S than at Ti; b128 is worse at S than at B). Within each size the b128 ratio is below
# the b64 one. The memory ratio falls with size (b64: 2.00, 1.96, 1.77), so memory is not part of
# the trend. The rule (paper_numbers.yaml 003-table4-trends, fixed before any measurement):
#   scale: every throughput ratio (inference, each training batch) lower at Base than at Tiny;
#   batch: at every size measured, the training throughput ratio at the largest batch lower
#          than at the smallest;
#   reproduced when every comparison holds, contradicted when none does, else inconclusive;
#   judged on a GPU measurement only (is_gpu), as 003-table4-runtime.
SIZES = ("tiny", "small", "base")  # the benchmark's names of Table 4's Ti, S, B (bench.cases.VIT_SIZES)


def size_ratios(df: pd.DataFrame, size: str) -> dict[str, float] | None:
    """ratios (GKA over DeiT at the paper's shape) at one size: that function reads
    gka_tiny and deit_tiny, so the size's two models are handed to it under those names."""
    names = {f"gka_{size}": PAIR[0], f"deit_{size}": PAIR[1]}
    mine = df[df["model"].isin(list(names))]
    return ratios(mine.assign(model=mine["model"].map(names)))


def paper_frame(paper: dict) -> pd.DataFrame:
    """Table 4 (paper_bench.yaml) as a models.csv, so that the paper's numbers go through the
    same functions as ours."""
    rows = []
    for size, models in paper["vit"].items():
        for variant, v in models.items():
            head = {"family": "vit", "status": "ok", "shape": PAPER_SHAPE, "model": f"{variant}_{size}"}
            rows.append({**head, "mode": "infer", "batch": v["infer_batch"], "items_per_s": v["infer"],
                         "peak_mib": v["infer_mem"]})
            rows += [{**head, "mode": "train", "batch": b, "items_per_s": v[f"train{b}"],
                      "peak_mib": v[f"train{b}_mem"]} for b in (64, 128)]
    return pd.DataFrame(rows)


def _train_speed(r: dict[str, float]) -> list[tuple[int, float]]:
    """(batch, throughput ratio) of the training measurements, smallest batch first."""
    return sorted((int(k.split()[1][1:]), v) for k, v in r.items() if k.startswith("train") and k.endswith("img/s"))


def trend(by_size: dict[str, dict[str, float] | None]) -> tuple[str, list[str]]:
    """The rule above on the ratios of each size: (verdict, each comparison in words)."""
    checks = []
    ti, base = by_size.get("tiny") or {}, by_size.get("base") or {}
    for key in (k for k in ti if k.endswith("img/s") and k in base):
        checks.append((base[key] < ti[key], f"{key} B {base[key]:.2f}x vs Ti {ti[key]:.2f}x"))
    for size, r in by_size.items():
        train = _train_speed(r or {})
        if len(train) >= 2:
            (b0, r0), (b1, r1) = train[0], train[-1]
            checks.append((r1 < r0, f"{size} train b{b1} {r1:.2f}x vs b{b0} {r0:.2f}x"))
    if not checks:
        return verdicts.INCONCLUSIVE, []
    held = [ok for ok, _ in checks]
    verdict = verdicts.REPRODUCED if all(held) else verdicts.CONTRADICTED if not any(held) else verdicts.INCONCLUSIVE
    return verdict, [f"{text} ({'holds' if ok else 'fails'})" for ok, text in checks]


def table4_trend_claim(claim: dict, measured: list[tuple[str, pd.DataFrame]], paper: dict,
                       scale: str) -> ClaimResult:
    """The claim on the first GPU measurement among `measured` ((label, models.csv)) with Ti and
    B, else the first at all (a CPU's: not comparable); "not run" without both sizes."""
    paper_by = {s: size_ratios(paper_frame(paper), s) for s in SIZES}
    beside = f"paper (RTX 5090): {'; '.join(trend(paper_by)[1])}"
    found = [(label, df, by) for label, df in measured
             if (by := {s: size_ratios(df, s) for s in SIZES})["tiny"] and by["base"]]
    if not found:
        return ClaimResult(claim, verdicts.NOT_RUN, scale=scale, ours="—",
                           detail=f"no models.csv with deit and gka at both tiny and base at "
                                  f"{PAPER_SHAPE} (bench.families vit at bench.size paper, or "
                                  f"bench.paper_vit_sizes with Ti and B); {beside}")
    label, df, by = next((x for x in found if is_gpu(x[1])), found[0])
    verdict, words = trend(by)
    if not is_gpu(df):
        devices = ", ".join(dict.fromkeys(str(d) for d in df.get("device", pd.Series(dtype=str)).dropna())) or "unknown"
        verdict = verdicts.not_comparable(f"measured on a CPU ({devices}); the paper measured RTX 5090 GPUs, where "
                                       f"fused attention kernels decide the gap")
    return ClaimResult(claim, verdict, scale=scale, ours=f"GKA / DeiT: {'; '.join(words)} ({label})",
                       detail=f"{beside}; {claim.get('rule', '')}".rstrip("; "))
