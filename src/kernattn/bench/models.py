"""Whole-model throughput, peak memory and MFU (issue 7): the engine behind `kernattn bench`.

A `Case` is one model to measure: how to build it, how to make a batch of inputs, its loss,
and the unit of throughput (images or tokens). `measure_case` times it the way the GKA paper's
Table 4 does, and more carefully:

- training: forward + backward + AdamW step at each of the given batch sizes;
- inference: forward under inference_mode at each batch size (the report takes the best);
- warm-up steps excluded (compilation, allocator and autotuning), then `reps` timed steps,
  the median reported with the interquartile range beside it;
- CUDA events and torch.cuda.max_memory_allocated on GPU (absolute: weights, optimiser state
  and activations, as the paper's "Mem (MB)"); on CPU perf_counter and the profiler's
  allocation records (bench.timing.cpu_peak_bytes) added to the bytes held before the step;
- FLOPs counted once per (case, mode) with torch.utils.flop_counter.FlopCounterMode on a
  batch of one, scaled by the batch; MFU = counted FLOPs / time / the device's peak (GPU
  only: a CPU has no single honest peak, so its MFU is left empty).

Every row records the device, dtype, torch version, compile on/off, batch and shape; a batch
that does not fit gives a row with status "oom" rather than ending the benchmark.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from .peaks import kind_for_name
from .timing import device_name, peak_bytes, time_step, utc_timestamp

SCHEMA = {
    "family": str, "model": str, "baseline": str, "variant": str, "mode": str, "batch": int, "shape": str,
    "unit": str, "items_per_s": float, "step_ms": float, "step_ms_iqr": float, "reps": int,
    "peak_mib": float, "params": int, "flops_per_item": float, "mfu": float, "status": str,
    "device": str, "dtype": str, "torch": str, "compile": bool, "timestamp": str,
}


@dataclass(frozen=True)
class Case:
    family: str                                   # vit | char_gpt | lm
    model: str                                    # e.g. deit_tiny, gka_tiny, char-rope
    variant: str                                  # the attention variant (report label)
    shape: str                                    # e.g. "224px/16", "ctx256 d512 4x4"
    unit: str                                     # "img" or "tok": what one throughput item is
    items_per_sample: int                         # 1 image, or the sequence length in tokens
    build: Callable[[], nn.Module]
    batch: Callable[[int, torch.device], tuple]   # batch size -> model inputs (targets last)
    loss: Callable[[nn.Module, tuple], torch.Tensor]
    forward: Callable[[nn.Module, tuple], torch.Tensor]
    baseline: str | None = None                   # the model this one's ratios are taken against


@dataclass(frozen=True)
class Settings:
    device: torch.device
    dtype: torch.dtype = torch.float32            # bf16 -> autocast on CUDA
    compile: bool = False
    train_batches: tuple[int, ...] = (64, 128)
    infer_batches: tuple[int, ...] = (32, 64, 128, 256, 512)
    warmup: int = 3
    reps: int = 10
    seed: int = 0


def peak_for_name(name: str, dtype: torch.dtype) -> float | None:
    """Dense bf16/fp16 peak FLOP/s of the GPU called `name`, or None when unknown (or fp32)."""
    if dtype not in (torch.bfloat16, torch.float16):
        return None
    kind = kind_for_name(name)  # bench/gpus.yaml: the data sheets' dense bf16 peaks
    return kind.bf16 if kind else None


def peak_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """The device's dense peak for `dtype`, or None (CPUs, unknown GPUs, fp32)."""
    return peak_for_name(torch.cuda.get_device_name(device), dtype) if device.type == "cuda" else None


def _autocast(settings: Settings):
    enabled = settings.device.type == "cuda" and settings.dtype in (torch.bfloat16, torch.float16)
    return torch.autocast("cuda", dtype=settings.dtype, enabled=enabled)


def count_flops(case: Case, mode: str, device: torch.device) -> float:
    """FLOPs of one sample: FlopCounterMode over forward (+ backward when training), batch 1,
    eager and in float32 (counts do not depend on dtype or compilation). SDPA's math backend:
    FlopCounterMode has no formula for the CPU's flash kernel and would count its matmuls as 0."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = case.build().to(device)
    inputs = case.batch(1, device)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        if mode == "train":
            case.loss(model, inputs).backward()
        else:
            with torch.no_grad():
                case.forward(model, inputs)
    return float(counter.get_total_flops())


def held_bytes(*objs) -> int:
    """Bytes of the tensors a model and its optimiser keep between steps (CPU memory base)."""
    seen, total = set(), 0
    for obj in objs:
        tensors = []
        if isinstance(obj, nn.Module):
            tensors = [*obj.parameters(), *obj.buffers()]
            tensors += [p.grad for p in obj.parameters() if p.grad is not None]
        elif isinstance(obj, torch.optim.Optimizer):
            tensors = [v for state in obj.state.values() for v in state.values() if torch.is_tensor(v)]
        for t in tensors:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total


def step_fn(case: Case, model: nn.Module, inputs: tuple, mode: str, settings: Settings):
    if mode == "infer":
        def infer():
            with torch.inference_mode(), _autocast(settings):
                case.forward(model, inputs)
        return infer, None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train():
        optimizer.zero_grad(set_to_none=True)
        with _autocast(settings):
            loss = case.loss(model, inputs)
        loss.backward()
        optimizer.step()
    return train, optimizer


def quartiles(times: list[float]) -> tuple[float, float]:
    if len(times) < 2:
        return times[0], 0.0
    q1, q2, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return q2, q3 - q1


def _row(case: Case, mode: str, batch: int, settings: Settings, flops_per_item: float) -> dict:
    return {"family": case.family, "model": case.model, "baseline": case.baseline or "",
            "variant": case.variant, "mode": mode, "batch": batch, "shape": case.shape, "unit": case.unit,
            "items_per_s": float("nan"), "step_ms": float("nan"), "step_ms_iqr": float("nan"), "reps": 0,
            "peak_mib": float("nan"), "params": 0, "flops_per_item": flops_per_item, "mfu": float("nan"),
            "status": "ok", "device": device_name(settings.device),
            "dtype": str(settings.dtype).removeprefix("torch."), "torch": torch.__version__,
            "compile": settings.compile, "timestamp": utc_timestamp()}


@dataclass
class _Live:
    """One case made ready to step: its model, optimiser, inputs and step function."""
    case: Case
    row: dict
    model: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    step: Callable[[], None] | None = None
    times: list[float] | None = None


def _prepare(live: _Live, mode: str, batch: int, settings: Settings) -> None:
    torch.manual_seed(settings.seed)
    live.model = live.case.build().to(settings.device)
    live.row["params"] = sum(p.numel() for p in live.model.parameters())
    live.model.train(mode == "train")
    runner = torch.compile(live.model) if settings.compile else live.model
    inputs = live.case.batch(batch, settings.device)
    live.step, live.optimizer = step_fn(live.case, runner, inputs, mode, settings)
    for _ in range(settings.warmup):
        live.step()
    live.times = []


def _peak_bytes(live: _Live, device: torch.device) -> int:
    """What this model needs at the top of a step: the tensors it and its optimiser hold, plus
    the step's own high-water mark above that (the other cases' models stay out of it)."""
    return held_bytes(live.model, live.optimizer) + peak_bytes(live.step, device)


def _release(live: _Live, device: torch.device) -> None:
    live.model = live.optimizer = live.step = None
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_round(cases: list[Case], mode: str, batch: int, settings: Settings,
                  flops: dict[str, float]) -> list[dict]:
    """Every case at one (mode, batch), timed round-robin: rep i of each case runs before rep
    i+1 of any, so load on a shared machine falls on all of them alike and their ratios hold."""
    lives = [_Live(c, _row(c, mode, batch, settings, flops[c.model])) for c in cases]
    ready = []
    for live in lives:
        try:
            _prepare(live, mode, batch, settings)
            ready.append(live)
        except torch.OutOfMemoryError:
            live.row["status"] = "oom"
            _release(live, settings.device)
    try:
        for _ in range(settings.reps):
            for live in ready:
                live.times.append(time_step(live.step, settings.device))
        peak_rate = peak_flops(settings.device, settings.dtype)
        for live in ready:
            median, iqr = quartiles(live.times)
            items = batch * live.case.items_per_sample
            live.row.update(step_ms=median, step_ms_iqr=iqr, reps=len(live.times),
                            items_per_s=items / (median / 1e3),
                            peak_mib=_peak_bytes(live, settings.device) / 2**20)
            if peak_rate:
                live.row["mfu"] = live.row["flops_per_item"] * live.row["items_per_s"] / peak_rate
    finally:
        for live in ready:
            _release(live, settings.device)
    return [live.row for live in lives]


def measure_family(cases: list[Case], settings: Settings, modes: tuple[str, ...] = ("train", "infer"),
                   log: Callable[[str], None] | None = None) -> list[dict]:
    """All rows of one family: each mode and batch size in turn, a case dropped from larger
    batches once it ran out of memory."""
    rows = []
    for mode in modes:
        flops = {c.model: count_flops(c, mode, settings.device) / c.items_per_sample for c in cases}
        live_cases = list(cases)
        for batch in (settings.train_batches if mode == "train" else settings.infer_batches):
            if not live_cases:
                break
            got = measure_round(live_cases, mode, batch, settings, flops)
            rows += got
            for row in got:
                if log:
                    log(f"{row['model']:>18} {mode:5} b={batch:<4} {row['items_per_s']:12.1f} {row['unit']}/s "
                        f"{row['peak_mib']:9.1f} MiB  {row['status']}")
            live_cases = [c for c, row in zip(live_cases, got) if row["status"] != "oom"]
    return rows


# Targets of issue 7 (GPU only: CPU rows are measured, shown, and not judged).
TARGETS = {
    ("vit", "train", "throughput"): ">=1.0", ("vit", "infer", "throughput"): ">=1.0",
    ("vit", "train", "memory"): "<=1.05", ("vit", "infer", "memory"): "<=1.05",
    ("char_gpt", "train", "throughput"): ">=0.85",
}
MFU_TARGET = ("char_gpt", "train", 0.30)

RATIO_SCHEMA = {
    "family": str, "model": str, "baseline": str, "mode": str, "batch": str, "metric": str,
    "value": float, "baseline_value": float, "ratio": float, "target": str, "met": str, "device": str,
}


def _met(ratio: float, target: str, device_type: str) -> str:
    if not target or device_type != "cuda" or ratio != ratio:
        return ""
    bound = float(target[2:])
    return "yes" if (ratio >= bound if target.startswith(">=") else ratio <= bound) else "no"


def _best_infer(rows: list[dict], model: str) -> dict | None:
    ok = [r for r in rows if r["model"] == model and r["mode"] == "infer" and r["status"] == "ok"]
    return max(ok, key=lambda r: r["items_per_s"]) if ok else None


def compute_ratios(rows: list[dict], device_type: str) -> list[dict]:
    """Each model against its baseline, measured in the same run: training throughput and
    peak memory at every batch both ran, inference at each model's best batch (as Table 4).
    Targets are judged on CUDA only (`device_type`)."""
    out = []
    by_key = {(r["model"], r["mode"], r["batch"]): r for r in rows if r["status"] == "ok"}
    for model in dict.fromkeys(r["model"] for r in rows if r["baseline"]):
        first = next(r for r in rows if r["model"] == model)
        base, family = first["baseline"], first["family"]
        pairs = []
        for r in rows:
            if r["model"] == model and r["mode"] == "train" and (base, "train", r["batch"]) in by_key \
                    and r["status"] == "ok":
                pairs.append(("train", str(r["batch"]), r, by_key[(base, "train", r["batch"])]))
        mine, theirs = _best_infer(rows, model), _best_infer(rows, base)
        if mine and theirs:
            pairs.append(("infer", f"best ({mine['batch']} vs {theirs['batch']})", mine, theirs))
        for mode, batch, a, b in pairs:
            for metric, key in (("throughput", "items_per_s"), ("memory", "peak_mib")):
                ratio = a[key] / b[key] if b[key] else float("nan")
                target = TARGETS.get((family, mode, metric), "")
                out.append({"family": family, "model": model, "baseline": base, "mode": mode,
                            "batch": batch, "metric": metric, "value": a[key], "baseline_value": b[key],
                            "ratio": ratio, "target": target, "met": _met(ratio, target, device_type),
                            "device": a["device"]})
    fam, mode, bound = MFU_TARGET
    for r in rows:
        if r["family"] == fam and r["mode"] == mode and r["status"] == "ok" and r["mfu"] == r["mfu"]:
            out.append({"family": fam, "model": r["model"], "baseline": "", "mode": mode, "batch": str(r["batch"]),
                        "metric": "mfu", "value": r["mfu"], "baseline_value": float("nan"), "ratio": r["mfu"],
                        "target": f">={bound}", "met": "yes" if r["mfu"] >= bound else "no", "device": r["device"]})
    return out
