"""The measurement behind `kernattn bench-attention` (attention.py): each configuration built for
an impl at an N, its training step timed, and one row per (configuration, impl, N).

A training step: forward, then backward of the loss <output, R> with R a fixed standard-normal
tensor (`output.backward(R)`), reaching every parameter and x; gradients are dropped before each
step. The fast rows of one N are timed together, round-robin (bench.timing), so that a machine
that slows down mid-run slows every configuration alike; reference rows are timed one at a time.
A row whose build or step raises a RuntimeError is reported and left out.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import attention
from .attention_configs import BenchConfig, reference_allowed
from .timing import Measurement, Prepared, device_name, measure_interleaved, measure_or_isolate, utc_timestamp

IMPLS = ("fast", "reference")
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Column -> type of a row of the output CSV (attention.read_rows reads it back).
SCHEMA: dict[str, type] = {
    "variant": str,        # registry name (attention.build's first argument)
    "options": str,        # the build options, compact JSON with sorted keys
    "label": str,          # the configuration's short name, e.g. gpa-add-dp-M64
    "impl": str,           # fast | reference
    "causal": bool,        # written true / false
    "window": int,         # empty when there is no sliding window (read back as None)
    "B": int,
    "H": int,
    "d_head": int,
    "N": int,
    "dtype": str,
    "device": str,         # GPU name, or the CPU model
    "torch_version": str,
    "threads": int,        # torch.get_num_threads()
    "repeats": int,        # timed steps behind median_ms / min_ms
    "median_ms": float,
    "min_ms": float,
    "tokens_per_s": float,  # B * N / median
    "peak_mib": float,     # peak allocated during one step minus allocated before it
    "timestamp": str,      # ISO 8601, UTC, when the row was measured
}
Job = tuple[BenchConfig, str, int]  # (configuration, impl, N): one row


# ----------------------------------------------------------------------------- one row
def prepare(cfg: BenchConfig, impl: str, *, n: int, batch: int, heads: int, d_head: int,
            dtype: torch.dtype, device: torch.device, max_n: int) -> Prepared:
    """Build `cfg` for `impl` at sequence length n; return its training step and grad reset."""
    torch.manual_seed(0)
    module = attention.build(cfg.variant, d_model=heads * d_head, n_head=heads, causal=cfg.causal,
                             window=cfg.window, impl=impl, **cfg.build_options(max_n))
    module = module.to(device=device, dtype=dtype)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(batch, n, heads * d_head, generator=gen).to(device=device, dtype=dtype).requires_grad_(True)
    proj = torch.randn(batch, n, heads * d_head, generator=gen).to(device=device, dtype=dtype)
    leaves = [x, *module.parameters()]

    def step() -> None:
        module(x).backward(proj)

    def clear() -> None:
        for t in leaves:
            t.grad = None

    return Prepared(step, clear)


def measure(cfg: BenchConfig, impl: str, *, n: int, batch: int, heads: int, d_head: int,
            dtype: torch.dtype, device: torch.device, warmup: int, repeats: int,
            max_n: int) -> Measurement:
    """Build `cfg` for `impl` and time `repeats` forward+backward steps at sequence length n."""
    p = prepare(cfg, impl, n=n, batch=batch, heads=heads, d_head=d_head, dtype=dtype, device=device, max_n=max_n)
    return measure_interleaved([p], device, warmup, repeats)[0]


# ----------------------------------------------------------------------------- the run
@dataclass
class BenchSettings:
    configs: list[BenchConfig]
    seq_lens: list[int]
    batch: int = 2
    heads: int = 4
    d_head: int = 32
    dtype: str = "float32"
    device: str = "cpu"
    warmup: int = 2
    repeats: int = 5
    max_reference_n: int = 2048
    full_reference: bool = False
    impls: tuple[str, ...] = IMPLS


def plan(settings: BenchSettings) -> list[Job]:
    """(config, impl, N) of every row the run will measure, in order."""
    jobs = []
    for cfg in settings.configs:
        for impl in settings.impls:
            for n in settings.seq_lens:
                if impl == "reference" and not reference_allowed(
                        cfg, n, settings.max_reference_n, settings.full_reference):
                    continue
                jobs.append((cfg, impl, n))
    return jobs


def timing_groups(settings: BenchSettings, jobs: list[Job]) -> list[list[Job]]:
    """The jobs timed together: the fast rows of one N (round-robin; their ratios are the
    targets), and every reference row, memory-heavy, on its own."""
    groups: list[list[Job]] = []
    for impl in settings.impls:
        for n in settings.seq_lens:
            same = [j for j in jobs if j[1] == impl and j[2] == n]
            groups += [same] if impl == "fast" else [[j] for j in same]
    return [g for g in groups if g]


@dataclass
class _Progress:
    """The rows measured so far, the failures, and the log lines that say so."""
    total: int
    cuda: bool
    log: Callable[[str], None] | None
    failures: list[str] | None
    done: int = 0

    def failed(self, job: Job, exc: BaseException) -> None:
        self.done += 1
        cfg, impl, n = job
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        what = f"{cfg.label} {impl} N={n}: {type(exc).__name__}: {first}"
        if self.failures is not None:
            self.failures.append(what)
        if self.log:
            self.log(f"[{self.done:3d}/{self.total}] {what} (row skipped)")
        if self.cuda:
            torch.cuda.empty_cache()

    def measured(self, row: dict[str, Any]) -> None:
        self.done += 1
        if self.log:
            self.log(f"[{self.done:3d}/{self.total}] {row['label']:<21} {row['impl']:<9} N={row['N']:<5} "
                     f"{row['median_ms']:9.1f} ms (min {row['min_ms']:.1f})  {row['peak_mib']:8.1f} MiB")


def _measure_group(group: list[Job], settings: BenchSettings, progress: _Progress) -> list[dict[str, Any]]:
    """Build and time one group's rows; a row that fails to build or step is reported, not returned."""
    device = torch.device(settings.device)
    max_n = max(settings.seq_lens)
    shape = dict(batch=settings.batch, heads=settings.heads, d_head=settings.d_head,
                 dtype=DTYPES[settings.dtype], device=device, max_n=max_n)
    prepared, ok = [], []
    for job in group:
        cfg, impl, n = job
        try:
            prepared.append(prepare(cfg, impl, n=n, **shape))
            ok.append(job)
        except RuntimeError as exc:
            progress.failed(job, exc)
    measured = measure_or_isolate(prepared, device, settings.warmup, settings.repeats)
    del prepared
    dev_name = device_name(device)
    rows = []
    for job, m in zip(ok, measured):
        if isinstance(m, Exception):
            progress.failed(job, m)
            continue
        rows.append(_row(settings, *job, m, dev_name, max_n))
        progress.measured(rows[-1])
    return rows


def run_benchmark(settings: BenchSettings, log: Callable[[str], None] | None = None,
                  failures: list[str] | None = None) -> list[dict[str, Any]]:
    """Measure every row of `plan(settings)`; returns the rows (dicts keyed by SCHEMA).

    A row whose step raises a RuntimeError (out of memory, an op without a kernel for the
    dtype, ...) is skipped; its one-line description is appended to `failures`.
    """
    jobs = plan(settings)
    progress = _Progress(len(jobs), torch.device(settings.device).type == "cuda", log, failures)
    rows = []
    for group in timing_groups(settings, jobs):
        rows += _measure_group(group, settings, progress)
    order = {(c.label, i, n): k for k, (c, i, n) in enumerate(jobs)}
    rows.sort(key=lambda r: order[(r["label"], r["impl"], r["N"])])
    return rows


def _row(settings, cfg, impl, n, m: Measurement, dev_name: str, max_n: int) -> dict[str, Any]:
    median = statistics.median(m.times_ms)
    return {
        "variant": cfg.variant,
        "options": json.dumps(cfg.build_options(max_n), sort_keys=True, separators=(",", ":")),
        "label": cfg.label,
        "impl": impl,
        "causal": cfg.causal,
        "window": cfg.window,
        "B": settings.batch,
        "H": settings.heads,
        "d_head": settings.d_head,
        "N": n,
        "dtype": settings.dtype,
        "device": dev_name,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": settings.repeats,
        "median_ms": median,
        "min_ms": min(m.times_ms),
        "tokens_per_s": settings.batch * n / (median / 1e3) if median > 0 else math.inf,
        "peak_mib": m.peak_bytes / 2**20,
        "timestamp": utc_timestamp(),
    }
