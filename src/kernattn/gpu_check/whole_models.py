"""Part `models`: the whole-model table (GKA paper Table 4 and the language models) through
`kernattn bench`'s own machinery (kernattn.bench: cases, round-robin timing, FLOP counts, MFU).

Full shapes: params.yaml's bench section at the paper scale (DeiT/GKA/VLT-Ti/S/B at 224 px,
training at batches 64 and 128 and inference over 32-512; the char GPT rows at ctx 256, batch
256; the LM at depth 12 x 2048), bf16 autocast and torch.compile on CUDA. Tiny: the micro
scale's models at batch 2 on whatever device, in seconds. Writes models.csv and
models_ratios.csv in `kernattn bench`'s format (the report shows every results/gpu/*/models.csv
beside the papers' Table 4) with issue 18's targets added: GKA >= 1.0x DeiT's training
throughput and <= 1.05x its memory, every char GPT row (GPA through Flex among them) >= 0.85x
RoPE on SDPA, the char GPT >= 30% MFU, and the LM at depth 12 >= 35% MFU; judged on CUDA only.
"""

from __future__ import annotations

import dataclasses
import sys

from ..bench.models import RATIO_SCHEMA, SCHEMA, compute_ratios, measure_family
from ..bench.stage import CSV_NAME, RATIOS_NAME, family_cases, settings_for
from ..config import load_params
from .common import Context, PartResult, write_csv

LM_MFU_TARGET = 0.35
TINY_BENCH = dict(size="small", char_rows=("rope", "gpa_m64_rope", "gka"), train_batches=(2,), infer_batches=(2,),
                  char_batch=2, lm_batch=2, warmup=1, reps=2, compile=False)


def bench_params(ctx: Context):
    """params.yaml at the paper scale (full) or the micro scale shrunk to batch 2 (tiny)."""
    params = load_params(ctx.params, "micro" if ctx.tiny else "paper")
    bench = dataclasses.replace(params.bench, families=ctx.families, **(TINY_BENCH if ctx.tiny else {}))
    return dataclasses.replace(params, bench=bench)


def lm_mfu_ratios(rows: list[dict], device_type: str) -> list[dict]:
    """Issue 18's LM target: MFU >= 35% at depth 12 (the bench's own targets stop at the char GPT)."""
    out = []
    for r in rows:
        if r["family"] == "lm" and r["mode"] == "train" and r["status"] == "ok" and r["mfu"] == r["mfu"]:
            met = ("yes" if r["mfu"] >= LM_MFU_TARGET else "no") if device_type == "cuda" else ""
            out.append({"family": "lm", "model": r["model"], "baseline": "", "mode": "train", "batch": str(r["batch"]),
                        "metric": "mfu", "value": r["mfu"], "baseline_value": float("nan"), "ratio": r["mfu"],
                        "target": f">={LM_MFU_TARGET}", "met": met, "device": r["device"]})
    return out


def run_part(ctx: Context, log) -> PartResult:
    params = bench_params(ctx)
    rows = []
    for family in ctx.families:
        settings, modes = settings_for(params.bench, family, ctx.device)
        log(f"models: {family} on {ctx.device} ({settings.dtype}, compile {settings.compile})")
        rows += measure_family(family_cases(params, family), settings, modes, log=lambda m: print(m, file=sys.stderr))
    ratios = compute_ratios(rows, ctx.device.type) + lm_mfu_ratios(rows, ctx.device.type)
    result = PartResult("models", ok=True)
    result.files += [write_csv(ctx, CSV_NAME, SCHEMA, rows), write_csv(ctx, RATIOS_NAME, RATIO_SCHEMA, ratios)]
    result.lines += _summary(rows, ratios, ctx)
    return result


def _summary(rows, ratios, ctx) -> list[str]:
    ok = [r for r in rows if r["status"] == "ok"]
    lines = [f"{len(ok)} of {len(rows)} rows measured ({', '.join(ctx.families)}); "
             f"{sum(r['status'] == 'oom' for r in rows)} out of memory.", "",
             "| model | mode | batch | items/s | peak MiB | MFU |", "|---|---|---|---|---|---|"]
    for r in ok:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] == r["mfu"] else "-"
        lines.append(f"| {r['model']} | {r['mode']} | {r['batch']} | {r['items_per_s']:.1f} {r['unit']} | "
                     f"{r['peak_mib']:.0f} | {mfu} |")
    judged = [r for r in ratios if r["met"]]
    if judged:
        missed = [r for r in judged if r["met"] == "no"]
        lines += ["", f"Targets: {len(judged) - len(missed)} of {len(judged)} met."]
        lines += [f"- missed: {r['model']} {r['mode']} {r['batch']} {r['metric']} {r['ratio']:.3f} "
                  f"(target {r['target']})" for r in missed]
    else:
        lines += ["", "Targets are judged on a GPU only; none judged here."]
    return lines
