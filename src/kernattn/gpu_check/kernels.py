"""Part `kernels`: attention alone at the FlashAttention-3 paper's shapes, forward and
forward + backward, causal and not: softmax (SDPA), GKA (SDPA on the augmented q', k'),
GPA (add, M = 64) and ALiBi (FlexAttention with the lag table in score_mod).

Shapes (FA3 paper, section 4.1): batch x length = 16k tokens, heads x head dim = 2048
(16 heads of 128), lengths 512-8192; bf16 on CUDA. Each variant is the registry module's own
fast path (`module.fast`) on given q, k, v (GKA: on given features, which are its values), so
the projections are left out and what is timed is the attention and what it needs (GPA's
bank table, GKA's feature shift and padding). Timed with kernattn.bench.timing:
round-robin over the variants of one shape after warm-up (compilation), median of the reps,
CUDA events, peak memory above what was allocated before the step.

TFLOP/s counts the FA papers' attention FLOPs: forward 4 B H n^2 d (two matmuls), halved
when causal; forward + backward 3.5x that (the backward is 2.5 forwards). GKA is counted at
its head dim d, not the padded d + 8, so its TFLOP/s compare with softmax's as useful work.
`frac_peak` divides by the GPU's dense bf16 peak from the data sheet (bench.models), and
`frac_matmul` by a bf16 8192^3 matmul measured in the same run (the peak this GPU reaches).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from .. import attention
from ..bench.timing import Prepared, device_name, measure_or_isolate, time_step, utc_timestamp
from ..bench.models import peak_for_name
from .common import Context, PartResult, write_csv

SCHEMA = {"variant": str, "path": str, "mode": str, "causal": bool, "batch": int, "n": int, "heads": int,
          "d_head": int, "dtype": str, "median_ms": float, "tflops": float, "frac_peak": float,
          "frac_matmul": float, "peak_mib": float, "status": str, "device": str, "torch": str, "timestamp": str}
CSV_NAME = "kernels.csv"
VARIANTS = {  # label -> (registry variant, options, path the fast call takes on CUDA)
    "softmax": ("softmax", {"position": "none"}, "sdpa"),
    "gka": ("gka", {}, "sdpa"),
    "gpa-add-M64": ("gpa", {"n_kernels": 64, "combine": "add"}, "flex"),
    "alibi": ("softmax", {"position": "alibi"}, "flex"),
}
MODES = ("fwd", "fwd+bwd")


@dataclass(frozen=True)
class KernelShape:
    tokens: int
    heads: int
    d_head: int
    lengths: tuple[int, ...]
    warmup: int
    reps: int
    matmul: int


FULL = KernelShape(tokens=16384, heads=16, d_head=128, lengths=(512, 1024, 2048, 4096, 8192), warmup=3, reps=10,
                   matmul=8192)
TINY = KernelShape(tokens=128, heads=2, d_head=16, lengths=(32, 64), warmup=1, reps=2, matmul=128)


def attention_flops(batch: int, heads: int, n: int, d: int, causal: bool, mode: str) -> float:
    """The FA papers' count: 4 B H n^2 d forward, halved when causal; x3.5 with the backward."""
    fwd = 4.0 * batch * heads * n * n * d * (0.5 if causal else 1.0)
    return fwd * (3.5 if mode == "fwd+bwd" else 1.0)


def matmul_flops_per_s(ctx: Context, size: int, dtype: torch.dtype, reps: int) -> float:
    """FLOP/s of a size^3 matmul in `dtype`: the dense peak this device reaches, measured now."""
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=gen).to(ctx.device, dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    ms = statistics.median(time_step(lambda: a @ b, ctx.device) for _ in range(max(reps, 3)))
    return 2.0 * size**3 / (ms / 1e3)


def _prepare(ctx, label, causal, batch, n, shape, dtype, mode) -> Prepared:
    """The variant's fast call on fixed inputs: a step (forward, or forward + backward) and a reset."""
    variant, options, _ = VARIANTS[label]
    torch.manual_seed(0)
    module = attention.build(variant, d_model=shape.heads * shape.d_head, n_head=shape.heads, causal=causal,
                             impl="fast", **options).to(ctx.device)  # float32 parameters, as under autocast
    gen = torch.Generator().manual_seed(n)
    size = (batch, shape.heads, n, shape.d_head)
    train = mode == "fwd+bwd"
    q, k, v, probe = (torch.randn(size, generator=gen).to(ctx.device, dtype) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(train)
    p = SimpleNamespace(f=v, v=v, n=n) if variant == "gka" else SimpleNamespace(q=q, k=k, v=v, n=n)
    leaves = [q, k, v, *module.parameters()]

    def step() -> None:
        if train:
            module.fast(p).backward(probe)
        else:
            with torch.no_grad():
                module.fast(p)

    def clear() -> None:
        for t in leaves:
            t.grad = None
    return Prepared(step, clear)


def _row(ctx, label, mode, causal, batch, n, shape, dtype, times, peak, rates) -> dict:
    median = statistics.median(times) if times else float("nan")
    flops = attention_flops(batch, shape.heads, n, shape.d_head, causal, mode)
    rate = flops / (median / 1e3) if times else float("nan")
    sheet, measured = rates
    return {"variant": label, "path": VARIANTS[label][2] if ctx.is_gpu else "cpu", "mode": mode, "causal": causal,
            "batch": batch, "n": n, "heads": shape.heads, "d_head": shape.d_head,
            "dtype": str(dtype).removeprefix("torch."), "median_ms": median, "tflops": rate / 1e12,
            "frac_peak": rate / sheet if sheet else float("nan"), "frac_matmul": rate / measured,
            "peak_mib": peak / 2**20, "status": "ok", "device": device_name(ctx.device), "torch": torch.__version__,
            "timestamp": utc_timestamp()}


def measure_shape(ctx, shape, dtype, n, causal, mode, rates) -> list[dict]:
    """Every variant at one (n, causal, mode), round-robin; a variant that fails gets a status row."""
    batch = max(1, shape.tokens // n)
    rows, ready = [], []
    for label in VARIANTS:
        try:
            ready.append((label, _prepare(ctx, label, causal, batch, n, shape, dtype, mode)))
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            rows.append(_failed(ctx, label, mode, causal, batch, n, shape, dtype, exc, rates))
    measured = measure_or_isolate([p for _, p in ready], ctx.device, shape.warmup, shape.reps)
    for (label, _), m in zip(ready, measured):
        if isinstance(m, Exception):
            rows.append(_failed(ctx, label, mode, causal, batch, n, shape, dtype, m, rates))
        else:
            rows.append(_row(ctx, label, mode, causal, batch, n, shape, dtype, m.times_ms, m.peak_bytes, rates))
    if ctx.is_gpu:
        torch.cuda.empty_cache()
    return rows


def _failed(ctx, label, mode, causal, batch, n, shape, dtype, exc, rates) -> dict:
    row = _row(ctx, label, mode, causal, batch, n, shape, dtype, [], 0, rates)
    first = (str(exc).strip().splitlines() or [""])[0][:120]
    row["status"] = "oom" if isinstance(exc, torch.OutOfMemoryError) else f"error: {type(exc).__name__}: {first}"
    return row


def run_part(ctx: Context, log) -> PartResult:
    shape = TINY if ctx.tiny else FULL
    dtype = torch.bfloat16 if ctx.is_gpu else torch.float32  # bf16 attention on a CPU is no reference point
    sheet = peak_for_name(device_name(ctx.device), dtype) if ctx.is_gpu else None
    measured = matmul_flops_per_s(ctx, shape.matmul, dtype, shape.reps)
    log(f"kernels: {shape.matmul}^3 {dtype} matmul {measured / 1e12:.1f} TFLOP/s"
        + (f" ({measured / sheet:.0%} of the data sheet's {sheet / 1e12:.0f})" if sheet else ""))
    rows = []
    for n in shape.lengths:
        for causal in (False, True):
            for mode in MODES:
                rows += measure_shape(ctx, shape, dtype, n, causal, mode, (sheet, measured))
        log(f"kernels: n={n} done")
    result = PartResult("kernels", ok=all(r["status"] in ("ok", "oom") for r in rows))
    result.files.append(write_csv(ctx, CSV_NAME, SCHEMA, rows))
    result.lines += _summary(rows, shape, dtype, sheet, measured)
    return result


def _summary(rows, shape, dtype, sheet, measured) -> list[str]:
    lines = [f"{shape.tokens} tokens per step, {shape.heads} heads x {shape.d_head}, {dtype}; the "
             f"{shape.matmul}^3 matmul reached {measured / 1e12:.1f} TFLOP/s"
             + (f" = {measured / sheet:.0%} of the data sheet's dense peak." if sheet else " (no data-sheet peak here)."),
             "", "TFLOP/s, forward + backward (causal in brackets); the ratio is the time of softmax (SDPA) "
             "over the variant's, at the same shape:", "",
             "| n | " + " | ".join(VARIANTS) + " |", "|---|" + "---|" * len(VARIANTS)]
    get = {(r["variant"], r["n"], r["causal"], r["mode"]): r for r in rows}
    for n in shape.lengths:
        cells = []
        for label in VARIANTS:
            a, c = get.get((label, n, False, "fwd+bwd")), get.get((label, n, True, "fwd+bwd"))
            base = get.get(("softmax", n, False, "fwd+bwd"))
            if a is None or a["status"] != "ok":
                cells.append(a["status"] if a else "-")
                continue
            ratio = base["median_ms"] / a["median_ms"] if base and base["status"] == "ok" else float("nan")
            cells.append(f"{a['tflops']:.1f} ({c['tflops']:.1f}) x{ratio:.2f}" if c else f"{a['tflops']:.1f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    bad = [r for r in rows if r["status"] not in ("ok",)]
    lines += [f"- {r['variant']} {r['mode']} n={r['n']} causal={r['causal']}: {r['status']}" for r in bad]
    return lines
