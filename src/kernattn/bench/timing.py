"""Timing and memory measurement of training (or inference) steps, on CPU or CUDA.

The library behind `kernattn bench-attention` (bench.attention), `kernattn bench`
(bench.models) and `kernattn gpu-check` (gpu_check.kernels); it knows nothing of attention.

Timing (`time_step`): CPU: time.perf_counter around the step. CUDA: CUDA events around the
step, with a synchronize before and after.

Peak memory (`peak_bytes`): the high-water mark of the memory allocated while a step runs,
minus what was allocated before it, in bytes.
- CUDA: torch.cuda.reset_peak_memory_stats(), then max_memory_allocated() - memory_allocated()
  taken before the step.
- CPU (`cpu_peak_bytes`): torch has no CPU high-water mark, so the step runs once under
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
  The profiler is only on for that one extra step, never for the timed ones.

Round-robin (`measure_interleaved`): several prepared steps are timed one step of each per
round, so a machine that slows down mid-run slows every one alike and the ratios between
them stay honest; `measure_or_isolate` falls back to one at a time to find a failing one.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

import torch

from .. import hardware


def cpu_model() -> str:
    """The CPU model (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model with what its kernels run at, e.g. "AMD EPYC [AVX2]" or
    "Intel(R) Xeon(R) Processor [AVX512 bf16]": ATen's kernel level, and bf16 where its
    matmuls are native (hardware.py). One model times differently at another level (a capped
    ATEN_CPU_CAPABILITY or ONEDNN_MAX_CPU_ISA; bf16 60 times slower without native support),
    so every bench CSV's `device` column says which it was."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    native = " bf16" if hardware.cpu_has_native_bf16() else ""
    return f"{cpu_model()} [{hardware.cpu_capability()}{native}]"


def utc_timestamp() -> str:
    """Now, ISO 8601 in UTC to the second: the `timestamp` column of every bench CSV."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def cuda_peak_bytes(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak CUDA memory allocated while `fn` runs, above what was allocated before (bytes)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - before)


def peak_bytes(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak memory allocated on `device` while `fn` runs, above what was allocated before."""
    return cuda_peak_bytes(fn, device) if device.type == "cuda" else cpu_peak_bytes(fn)


@dataclass
class Measurement:
    times_ms: list[float]
    peak_bytes: int


@dataclass
class Prepared:
    """A step ready to run (forward, or forward + backward) and how to drop its gradients."""
    step: Callable[[], None]
    clear: Callable[[], None]


def measure_interleaved(prepared: list[Prepared], device: torch.device, warmup: int,
                        repeats: int) -> list[Measurement]:
    """Time several steps round-robin: each round runs one step of every entry, so that a
    noisy machine slows all of them alike and their ratios stay comparable. Gradients are
    dropped before every step; the peak is taken over one more step of each, after timing."""
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


def measure_or_isolate(prepared: list[Prepared], device: torch.device, warmup: int,
                       repeats: int) -> list[Measurement | RuntimeError]:
    """`measure_interleaved`, and when a step raises a RuntimeError (out of memory, an op with
    no kernel for the dtype), each entry again on its own: the failing ones get their error."""
    try:
        return list(measure_interleaved(prepared, device, warmup, repeats))
    except RuntimeError:
        pass
    out: list[Measurement | RuntimeError] = []
    for p in prepared:
        try:
            out.append(measure_interleaved([p], device, warmup, repeats)[0])
        except RuntimeError as exc:
            out.append(exc)
    return out


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
