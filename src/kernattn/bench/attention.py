"""Attention benchmark: forward+backward time and peak memory, fast path vs explicit reference.

    kernattn bench-attention --out results/bench/attention.csv

For every configuration in DEFAULT_CONFIGS (or the `--variants` subset), for impl in (fast,
reference) and every N in `--seq-lens` (default 256 1024 2048), one module of shape
B x N x (H d_head) is built (seed 0) and a training step is timed: forward, then backward of
the loss <output, R> with R a fixed standard-normal tensor (`output.backward(R)`), reaching
every parameter and x. Gradients are dropped (set to None) before each step, so every step
allocates them afresh. `--warmup` steps are run untimed, then `--repeats` timed steps; a
row reports their median and min (ms) and B N / median as tokens/s. The fast rows of one N
are built together and timed round-robin (one step of each per round), so a machine that
slows down mid-run slows every configuration alike and the ratios between them, which are
what the targets are about, stay honest; reference rows are timed one at a time.

Timing: CPU: time.perf_counter around the step. CUDA: CUDA events around the step, with a
synchronize before and after.

Peak memory (`peak_mib`): the high-water mark of the memory allocated during one extra step,
minus what was allocated before it (x, the parameters, R), in MiB.
- CUDA: torch.cuda.reset_peak_memory_stats(), then max_memory_allocated() - memory_allocated()
  taken before the step.
- CPU: torch has no CPU high-water mark, so the step runs once under
  torch.profiler.profile(profile_memory=True) and the peak is taken over the running sum of
  the profiler's allocation records ("[memory]" events: +bytes on allocation, -bytes on free)
  sorted by time. This counts every tensor allocation of the CPU allocator, on any thread
  the profiler sees. Checked on torch 2.13 CPU against the process's peak resident set
  (VmHWM after resetting it through /proc/self/clear_refs, glibc run with
  MALLOC_MMAP_THRESHOLD_=65536 so freed blocks go back to the OS): gka fast and reference
  at N=1024 and 2048, gpa-add-dp-M64, softmax (rope, alibi, lag_table), favor and nw-yat fast
  at N=1024 and/or 2048 agree within 0.5 MiB (e.g. 1160.1 vs 1160.1, 71.2 vs 71.7);
  GKA at B=2, H=4, d=32, N=2048 causal: reference 1160 MiB, fast 29 MiB, as in
  shared/notes/attention-math.md (1160 / 25 MiB there, which leaves out W_O and its gradients).
  The profiler is only on for this extra step, never for the timed ones.

Which reference rows are run (the reference materialises B x H x N x N tensors, often several
per kernel, and dominates the run time): `--max-reference-n` (default 2048) caps N for all
configurations; on top of that each configuration has its own cap (`reference_max_n`,
ignored with `--full-reference`):
- 2048 (no cap below the default N) for a representative subset: gka (the GKA speed and
  memory ratios the issue asks for), softmax-rope (the baseline) and gpa-mult-decay-M8
  (a GPA kernel bank);
- 1024 for the other configurations: at N=2048 a reference step costs 1-3 s (0.9-1.6 GB)
  each on the 2-core CPU, 8 steps per row; for all of them that would triple the run
  (about 2 minutes with these caps);
- 256 for the two GPA banks with M=64 (gpa-add-dp-M64, gpa-add-dp-rope-M64): the explicit
  bank of eq. 5 keeps several [H, N, N] tensors per kernel for backward, about 1.7 GiB and
  5 s per step at N=512, 6.6 GiB and 18 s at N=1024, and would need about 26 GiB at N=2048.
The fast rows are always run for every N.

Outputs: `--out` (CSV, columns SCHEMA) and, next to it, `<stem>_ratios.csv` (columns
RATIO_SCHEMA) with the comparisons of this run's rows:
- gka fast vs gka reference at the largest N having both: reference / fast median time
  (target >= 10) and peak memory (target >= 20);
- every lag-bias configuration (the gpa-* banks and softmax alibi, t5, lag_table): fast
  median time / softmax-rope fast median time at the same N (target <= 1.3);
- gka and gka-lm fast vs softmax-rope fast at the same N: tokens/s ratio (target >= 1.0 on
  CUDA, none on CPU) and peak memory ratio (no target).
Both files are written atomically (a temporary file in the same folder, then os.replace).
A row whose step raises a RuntimeError (out of memory; an op with no kernel for the dtype,
e.g. torch.cdist in bfloat16 on CPU for the gka reference) is left out and listed at the
end; the files are still written and the exit status is 1.
Tests never assert timings; the CPU of a shared machine is noisy (notes: up to 4x).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from .. import attention
from ..errors import UsageError

HELP = "time forward+backward and peak memory of every attention variant (fast vs reference)"

IMPLS = ("fast", "reference")
DEFAULT_SEQ_LENS = (256, 1024, 2048)
QUICK_SEQ_LENS = (32, 64)
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Column -> type of a row of the output CSV (see `read_rows`).
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
RATIO_SCHEMA: dict[str, type] = {
    "comparison": str,     # gka_fast_vs_reference | lag_bias_vs_rope | gka_vs_rope
    "label": str,
    "impl": str,
    "baseline_label": str,
    "baseline_impl": str,
    "N": int,
    "metric": str,         # see RATIO_METRICS
    "value": float,
    "target": str,         # e.g. ">=10", empty when there is none
    "meets_target": str,   # yes | no | empty
    "device": str,
    "dtype": str,
    "timestamp": str,
}
RATIO_METRICS = {
    "reference_over_fast_time": "baseline (reference) median ms / fast median ms",
    "reference_over_fast_memory": "baseline (reference) peak MiB / fast peak MiB",
    "time_over_baseline": "median ms / baseline median ms",
    "throughput_over_baseline": "tokens/s / baseline tokens/s",
    "memory_over_baseline": "peak MiB / baseline peak MiB",
}


# ----------------------------------------------------------------------------- configurations
@dataclass(frozen=True)
class BenchConfig:
    """One attention configuration: `attention.build(variant, **options)` under `label`."""

    label: str
    variant: str
    options: dict[str, Any] = field(default_factory=dict)
    causal: bool = True
    window: int | None = None
    lag_bias: bool = False             # in the lag-bias-vs-rope comparison
    max_len_option: bool = False       # set options["max_len"] to the largest N of the run
    reference_max_n: int | None = 1024  # None: only --max-reference-n applies

    def build_options(self, max_n: int) -> dict[str, Any]:
        opts = dict(self.options)
        if self.max_len_option:
            opts["max_len"] = max(max_n, int(opts.get("max_len", 0)))
        return opts


def _gpa(label, combine, kernel, m, rope=False, reference_max_n=1024):
    opts = {"combine": combine, "kernel": kernel, "n_kernels": m}
    if rope:
        opts["rope"] = True
    return BenchConfig(label, "gpa", opts, lag_bias=True, reference_max_n=reference_max_n)


DEFAULT_CONFIGS: tuple[BenchConfig, ...] = (
    BenchConfig("softmax-none", "softmax", {"position": "none"}),
    BenchConfig("softmax-rope", "softmax", {"position": "rope"}, reference_max_n=None),
    BenchConfig("softmax-learned_rope", "softmax", {"position": "learned_rope"}),
    BenchConfig("softmax-alibi", "softmax", {"position": "alibi"}, lag_bias=True),
    BenchConfig("softmax-t5", "softmax", {"position": "t5"}, lag_bias=True),
    BenchConfig("softmax-lag_table", "softmax", {"position": "lag_table"}, lag_bias=True, max_len_option=True),
    BenchConfig("valueless", "valueless", {}),
    _gpa("gpa-add-dp-M64", "add", "decay_periodic", 64, reference_max_n=256),
    _gpa("gpa-add-dp-rope-M64", "add", "decay_periodic", 64, rope=True, reference_max_n=256),
    _gpa("gpa-mult-dp-M8", "mult", "decay_periodic", 8),
    _gpa("gpa-mult-decay-M8", "mult", "decay", 8, reference_max_n=None),
    BenchConfig("gka", "gka", {}, reference_max_n=None),
    BenchConfig("gka-lm", "gka", {"rope": True, "qk_norm": True}),
    BenchConfig("nw-gaussian", "nw", {"kernel": "gaussian"}),
    BenchConfig("nw-yat", "nw", {"kernel": "yat"}),
    BenchConfig("nw-linear", "nw", {"kernel": "linear"}),
    BenchConfig("favor-m256", "favor", {"n_features": 256}),
)
BASELINE_LABEL = "softmax-rope"
GKA_LABELS = ("gka", "gka-lm")


def labels(configs: Iterable[BenchConfig] = DEFAULT_CONFIGS) -> list[str]:
    return [c.label for c in configs]


def select_configs(wanted: Sequence[str] | None) -> list[BenchConfig]:
    """The default configurations named in `wanted` (all when None), in the default order."""
    if not wanted:
        return list(DEFAULT_CONFIGS)
    known = labels()
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise UsageError(
            f"unknown variant label(s) {', '.join(map(repr, unknown))}; valid labels: {', '.join(known)}"
        )
    return [c for c in DEFAULT_CONFIGS if c.label in set(wanted)]


def reference_allowed(cfg: BenchConfig, n: int, max_reference_n: int, full_reference: bool) -> bool:
    if n > max_reference_n:
        return False
    return full_reference or cfg.reference_max_n is None or n <= cfg.reference_max_n


# ----------------------------------------------------------------------------- measuring
def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def time_step(step: Callable[[], None], device: torch.device) -> float:
    """Milliseconds of one call of `step` (CUDA events on CUDA, perf_counter elsewhere)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        step()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    t0 = time.perf_counter()
    step()
    return (time.perf_counter() - t0) * 1e3


def cpu_peak_bytes(fn: Callable[[], Any]) -> int:
    """High-water mark of CPU allocations made while `fn` runs, relative to its start (bytes).

    Runs `fn` once under torch.profiler with profile_memory=True and takes the maximum of the
    running sum of the allocation records (+bytes allocated, -bytes freed) in time order.
    Frees of memory allocated before the call count negative, so the result is the peak
    above what was allocated when `fn` started (never below 0).
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    records = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == DeviceType.CPU
    )
    current = peak = 0
    for _, nbytes in records:
        current += nbytes
        peak = max(peak, current)
    return peak


@contextlib.contextmanager
def _quiet_fd2():
    """Send file descriptor 2 to /dev/null: kineto prints two "USDT: ... profiler_start/stop"
    lines per profile straight to fd 2 (torch 2.13; KINETO_LOG_LEVEL does not stop them).
    Python exceptions are unaffected; the profiled step has already run unprofiled, so any
    warning it gives was shown then."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak memory allocated on `device` while `fn` runs, above what was allocated before."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return max(0, torch.cuda.max_memory_allocated(device) - before)
    return cpu_peak_bytes(fn)


@dataclass
class Measurement:
    times_ms: list[float]
    peak_bytes: int


@dataclass
class Prepared:
    step: Callable[[], None]
    clear: Callable[[], None]


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


def measure_interleaved(prepared: list[Prepared], device: torch.device, warmup: int,
                        repeats: int) -> list[Measurement]:
    """Time several steps round-robin: each round runs one step of every entry, so that a
    noisy machine slows all of them alike and their ratios stay comparable."""
    for p in prepared:
        for _ in range(warmup):
            p.clear()
            p.step()
    times: list[list[float]] = [[] for _ in prepared]
    for _ in range(repeats):
        for p, t in zip(prepared, times):
            p.clear()
            t.append(time_step(p.step, device))
    out = []
    for p, t in zip(prepared, times):
        p.clear()
        peak = peak_bytes(p.step, device)
        p.clear()
        out.append(Measurement(t, peak))
    return out


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


def plan(settings: BenchSettings) -> list[tuple[BenchConfig, str, int]]:
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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_benchmark(settings: BenchSettings, log: Callable[[str], None] | None = None,
                  failures: list[str] | None = None) -> list[dict[str, Any]]:
    """Measure every row of `plan(settings)`; returns the rows (dicts keyed by SCHEMA).

    A row whose step raises a RuntimeError (out of memory, an op without a kernel for the
    dtype, ...) is skipped; its one-line description is appended to `failures`.
    """
    device = torch.device(settings.device)
    dtype = DTYPES[settings.dtype]
    dev_name = device_name(device)
    max_n = max(settings.seq_lens)
    jobs = plan(settings)
    shape = dict(batch=settings.batch, heads=settings.heads, d_head=settings.d_head,
                 dtype=dtype, device=device, max_n=max_n)
    rows = []
    done = 0

    def fail(cfg, impl, n, exc):
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        what = f"{cfg.label} {impl} N={n}: {type(exc).__name__}: {first}"
        if failures is not None:
            failures.append(what)
        if log:
            log(f"[{done:3d}/{len(jobs)}] {what} (row skipped)")
        if device.type == "cuda":
            torch.cuda.empty_cache()

    # Fast rows of one N are timed together, round-robin (their ratios are the targets);
    # reference rows, memory-heavy, one at a time.
    groups: list[list[tuple[BenchConfig, str, int]]] = []
    for impl in settings.impls:
        for n in settings.seq_lens:
            batch_jobs = [j for j in jobs if j[1] == impl and j[2] == n]
            groups += [batch_jobs] if impl == "fast" else [[j] for j in batch_jobs]
    for group in groups:
        if not group:
            continue
        prepared, ok = [], []
        for cfg, impl, n in group:
            try:
                prepared.append(prepare(cfg, impl, n=n, **shape))
                ok.append((cfg, impl, n))
            except RuntimeError as exc:
                done += 1
                fail(cfg, impl, n, exc)
        try:
            measured = measure_interleaved(prepared, device, settings.warmup, settings.repeats)
        except RuntimeError:  # one failing member: fall back to one at a time to find it
            measured = []
            for p, (cfg, impl, n) in zip(prepared, ok):
                try:
                    measured.append(measure_interleaved([p], device, settings.warmup, settings.repeats)[0])
                except RuntimeError as exc:
                    measured.append(exc)
        del prepared
        for (cfg, impl, n), m in zip(ok, measured):
            done += 1
            if isinstance(m, Exception):
                fail(cfg, impl, n, m)
                continue
            rows.append(_row(settings, cfg, impl, n, m, dev_name, max_n))
            if log:
                r = rows[-1]
                log(f"[{done:3d}/{len(jobs)}] {cfg.label:<21} {impl:<9} N={n:<5} "
                    f"{r['median_ms']:9.1f} ms (min {r['min_ms']:.1f})  {r['peak_mib']:8.1f} MiB")
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
        "timestamp": _now(),
    }


# ----------------------------------------------------------------------------- ratios
def _ratio(num: float, den: float) -> float:
    if den == 0:
        return math.inf if num > 0 else math.nan
    return num / den


def _check(value: float, target: str) -> str:
    if not target or math.isnan(value):
        return ""
    op, bound = target[:2], float(target[2:])
    ok = value >= bound if op == ">=" else value <= bound
    return "yes" if ok else "no"


def compute_ratios(rows: list[dict[str, Any]], device_type: str = "cpu") -> list[dict[str, Any]]:
    """The comparisons of the module docstring, from rows of one run (missing rows: skipped).

    device_type ("cpu" or "cuda"): the gka-vs-rope throughput target applies on CUDA only.
    """
    index = {(r["label"], r["impl"], r["N"]): r for r in rows}
    out: list[dict[str, Any]] = []

    def add(comparison, row, base, metric, value, target=""):
        out.append({
            "comparison": comparison, "label": row["label"], "impl": row["impl"],
            "baseline_label": base["label"], "baseline_impl": base["impl"], "N": row["N"],
            "metric": metric, "value": value, "target": target, "meets_target": _check(value, target),
            "device": row["device"], "dtype": row["dtype"], "timestamp": _now(),
        })

    # GKA fast vs its reference, at the largest N having both.
    both = [n for (label, impl, n) in index if label == "gka" and impl == "fast" and ("gka", "reference", n) in index]
    if both:
        n = max(both)
        fast, ref = index[("gka", "fast", n)], index[("gka", "reference", n)]
        add("gka_fast_vs_reference", fast, ref, "reference_over_fast_time",
            _ratio(ref["median_ms"], fast["median_ms"]), ">=10")
        add("gka_fast_vs_reference", fast, ref, "reference_over_fast_memory",
            _ratio(ref["peak_mib"], fast["peak_mib"]), ">=20")

    lag_labels = {c.label for c in DEFAULT_CONFIGS if c.lag_bias}
    ns = sorted({r["N"] for r in rows})
    for n in ns:
        base = index.get((BASELINE_LABEL, "fast", n))
        if base is None:
            continue
        for cfg in DEFAULT_CONFIGS:
            row = index.get((cfg.label, "fast", n))
            if row is None:
                continue
            if cfg.label in lag_labels:
                add("lag_bias_vs_rope", row, base, "time_over_baseline",
                    _ratio(row["median_ms"], base["median_ms"]), "<=1.3")
        for label in GKA_LABELS:
            row = index.get((label, "fast", n))
            if row is None:
                continue
            add("gka_vs_rope", row, base, "throughput_over_baseline",
                _ratio(row["tokens_per_s"], base["tokens_per_s"]), ">=1.0" if device_type == "cuda" else "")
            add("gka_vs_rope", row, base, "memory_over_baseline", _ratio(row["peak_mib"], base["peak_mib"]))
    return out


# ----------------------------------------------------------------------------- files
def _format(value: Any, typ: type) -> str:
    if value is None:
        return ""
    if typ is bool:
        return "true" if value else "false"
    if typ is float:
        return repr(float(value)) if math.isfinite(value) else str(value)
    return str(value)


def _parse(text: str, typ: type) -> Any:
    if typ is bool:
        if text not in ("true", "false"):
            raise ValueError(f"expected true/false, got {text!r}")
        return text == "true"
    if typ is int:
        return None if text == "" else int(text)
    if typ is float:
        return float(text)
    return text


def write_csv_atomic(path: Path, schema: dict[str, type], rows: list[dict[str, Any]]) -> None:
    """Write rows to `path` through a temporary file in the same folder and os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual mode
        with os.fdopen(fd, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(list(schema))
            for row in rows:
                writer.writerow([_format(row[k], t) for k, t in schema.items()])
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_rows(path: Path, schema: dict[str, type] = SCHEMA) -> list[dict[str, Any]]:
    """Rows of a CSV written by this module, typed by `schema` (ValueError on a bad header/value)."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        if header != list(schema):
            raise ValueError(f"{path}: header {header} is not the schema {list(schema)}")
        return [{k: _parse(v, t) for (k, t), v in zip(schema.items(), line, strict=True)} for line in reader]


def ratios_path(out: Path) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}_ratios{out.suffix or '.csv'}")


# ----------------------------------------------------------------------------- printing
def _fmt(x: float | None, spec: str) -> str:
    return format("-", ">" + spec.split(".")[0]) if x is None else format(x, spec)


def format_table(rows: list[dict[str, Any]]) -> str:
    """One line per (label, N): fast and reference side by side."""
    index = {(r["label"], r["impl"], r["N"]): r for r in rows}
    keys = sorted({(r["label"], r["N"]) for r in rows},
                  key=lambda k: (labels().index(k[0]) if k[0] in labels() else len(DEFAULT_CONFIGS), k[1]))
    head = (f"{'label':<21} {'N':>5} | {'fast ms':>9} {'min ms':>9} {'tok/s':>9} {'MiB':>8} | "
            f"{'ref ms':>9} {'ref MiB':>8} | {'ref/fast t':>10} {'ref/fast m':>10}")
    lines = [head, "-" * len(head)]
    for label, n in keys:
        f, r = index.get((label, "fast", n)), index.get((label, "reference", n))
        g = lambda row, k: None if row is None else row[k]  # noqa: E731
        rt = _ratio(r["median_ms"], f["median_ms"]) if f and r else None
        rm = _ratio(r["peak_mib"], f["peak_mib"]) if f and r else None
        lines.append(
            f"{label:<21} {n:>5} | {_fmt(g(f, 'median_ms'), '9.1f')} {_fmt(g(f, 'min_ms'), '9.1f')} "
            f"{_fmt(g(f, 'tokens_per_s'), '9.0f')} {_fmt(g(f, 'peak_mib'), '8.1f')} | "
            f"{_fmt(g(r, 'median_ms'), '9.1f')} {_fmt(g(r, 'peak_mib'), '8.1f')} | "
            f"{_fmt(rt, '10.1f')} {_fmt(rm, '10.1f')}"
        )
    return "\n".join(lines)


def format_ratios(ratios: list[dict[str, Any]]) -> str:
    head = f"{'comparison':<22} {'label':<21} {'baseline':<24} {'N':>5} {'metric':<27} {'value':>8} {'target':>7} {'ok':>3}"
    lines = [head, "-" * len(head)]
    for r in ratios:
        base = f"{r['baseline_label']}/{r['baseline_impl']}"
        lines.append(f"{r['comparison']:<22} {r['label']:<21} {base:<24} {r['N']:>5} {r['metric']:<27} "
                     f"{r['value']:8.2f} {r['target']:>7} {r['meets_target']:>3}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _split(values: list[str] | None) -> list[str] | None:
    """['a,b', 'c'] -> ['a', 'b', 'c'] (lists may be given with spaces or commas)."""
    if values is None:
        return None
    return [v for item in values for v in item.split(",") if v]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("results/bench/attention.csv"),
                        help="output CSV (default %(default)s); the ratios go to <stem>_ratios.csv next to it")
    parser.add_argument("--variants", nargs="+", metavar="LABEL",
                        help="configurations to run, by label (space or comma separated; default all; see --list)")
    parser.add_argument("--list", action="store_true", help="print the configuration labels and exit")
    parser.add_argument("--seq-lens", nargs="+", metavar="N",
                        help=f"sequence lengths (default {' '.join(map(str, DEFAULT_SEQ_LENS))}; "
                             f"{' '.join(map(str, QUICK_SEQ_LENS))} with --quick)")
    parser.add_argument("--batch", "-B", type=_positive_int, default=2, help="batch size (default %(default)s)")
    parser.add_argument("--heads", "-H", type=_positive_int, default=4, help="heads (default %(default)s)")
    parser.add_argument("--d-head", type=_positive_int, default=32, help="head dim (default %(default)s)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="(default %(default)s)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: cuda if available)")
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS), help="(default: both)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps per row (default 2; 1 with --quick)")
    parser.add_argument("--repeats", type=_positive_int, default=None,
                        help="timed steps per row (default 5; 2 with --quick)")
    parser.add_argument("--max-reference-n", type=_positive_int, default=2048,
                        help="longest N for the reference impl (default %(default)s)")
    parser.add_argument("--full-reference", action="store_true",
                        help="ignore the per-configuration reference caps (see the module docstring)")
    parser.add_argument("--threads", type=_positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test settings: 1 warm-up, 2 repeats, short sequences")


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    configs = select_configs(_split(args.variants))
    seq_text = _split(args.seq_lens)
    if seq_text is None:
        seq_lens = list(QUICK_SEQ_LENS if args.quick else DEFAULT_SEQ_LENS)
    else:
        seq_lens = []
        for t in seq_text:
            try:
                seq_lens.append(_positive_int(t))
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"--seq-lens: {exc}") from None
        seq_lens = sorted(set(seq_lens))
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    if warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {warmup}")
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 5)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise UsageError(f"--device must be cpu, cuda, cuda:N or auto; got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device!r}: CUDA is not available in this torch build/machine")
    return BenchSettings(
        configs=configs, seq_lens=seq_lens, batch=args.batch, heads=args.heads, d_head=args.d_head,
        dtype=args.dtype, device=device, warmup=warmup, repeats=repeats,
        max_reference_n=args.max_reference_n, full_reference=args.full_reference,
        impls=tuple(i for i in IMPLS if i in args.impls),
    )


def cpu_busy_fraction(interval: float = 0.3) -> float | None:
    """Fraction of all CPUs' time spent busy over `interval` s, from /proc/stat (None elsewhere).

    Taken while this process sleeps, so it measures other work on the machine.
    """

    def sample():
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        return sum(values), values[3] + (values[4] if len(values) > 4 else 0)  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(interval)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return None if total1 <= total0 else 1.0 - (idle1 - idle0) / (total1 - total0)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.list:
        for c in DEFAULT_CONFIGS:
            ref = "any N" if c.reference_max_n is None else f"N <= {c.reference_max_n}"
            opts = json.dumps(c.options, sort_keys=True, separators=(",", ":"))
            print(f"{c.label:<21} {c.variant:<9} {opts:<64} reference: {ref}")
        return 0
    settings = settings_from_args(args)
    threads_before = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        return _run(args, settings)
    finally:
        torch.set_num_threads(threads_before)  # in-process callers (tests) keep their setting


def _run(args: argparse.Namespace, settings: BenchSettings) -> int:
    jobs = plan(settings)
    _log(f"bench-attention: {len(jobs)} rows, {len(settings.configs)} configurations, N in {settings.seq_lens}, "
         f"B={settings.batch} H={settings.heads} d_head={settings.d_head} {settings.dtype} on {settings.device}, "
         f"{torch.get_num_threads()} threads, warmup {settings.warmup}, repeats {settings.repeats}")
    busy = cpu_busy_fraction() if settings.device == "cpu" else None
    if busy is not None and busy > 0.25:
        _log(f"bench-attention: warning: the CPUs were {100 * busy:.0f}% busy with other work just before "
             f"the run; timings on a shared CPU are unreliable (intra-op threads wait on descheduled threads)")
    t0 = time.perf_counter()
    failures: list[str] = []
    rows = run_benchmark(settings, log=_log, failures=failures)
    ratios = compute_ratios(rows, torch.device(settings.device).type)
    write_csv_atomic(args.out, SCHEMA, rows)
    write_csv_atomic(ratios_path(args.out), RATIO_SCHEMA, ratios)
    print(format_table(rows))
    print()
    print("ratios (this run):")
    print(format_ratios(ratios) if ratios else "(none: the rows they need were not run)")
    print()
    print(f"wrote {args.out} ({len(rows)} rows) and {ratios_path(args.out)} ({len(ratios)} rows) "
          f"in {time.perf_counter() - t0:.0f} s")
    if failures:
        _log(f"bench-attention: {len(failures)} of {len(jobs)} rows failed and are missing from the CSV:")
        for what in failures:
            _log(f"  {what}")
        return 1
    return 0
