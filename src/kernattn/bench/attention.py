"""Attention benchmark: forward+backward time and peak memory, fast path vs explicit reference.

    kernattn bench-attention --out results/bench/attention.csv

For every configuration in DEFAULT_CONFIGS (bench.attention_configs; or the `--variants`
subset), for impl in (fast, reference) and every N in `--seq-lens` (default 256 1024 2048),
one module of shape B x N x (H d_head) is built (seed 0) and a training step is timed:
forward, then backward of the loss <output, R> with R a fixed standard-normal tensor
(`output.backward(R)`), reaching every parameter and x. Gradients are dropped (set to None)
before each step, so every step allocates them afresh. `--warmup` steps are run untimed, then
`--repeats` timed steps; a row reports their median and min (ms) and B N / median as tokens/s.
The fast rows of one N are built together and timed round-robin (one step of each per round),
so a machine that slows down mid-run slows every configuration alike and the ratios between
them, which are what the targets are about, stay honest; reference rows are timed one at a time.

The measurement is bench.attention_measure's; this module is the command and its files.
Timing and peak memory (`peak_mib`): bench.timing, whose docstring says how each is taken
(CUDA events or perf_counter; CUDA's max_memory_allocated or, on CPU, the profiler's
allocation records during one extra step, minus what was allocated before it, in MiB).

Which reference rows are run (the reference materialises B x H x N x N tensors, often several
per kernel, and dominates the run time): `--max-reference-n` (default 2048) caps N for all
configurations; on top of that each configuration has its own cap (`reference_max_n`,
ignored with `--full-reference`; bench.attention_configs says which and why).
The fast rows are always run for every N.

Outputs: `--out` (CSV, columns SCHEMA) and, next to it, `<stem>_ratios.csv` (columns
RATIO_SCHEMA) with the comparisons of this run's rows (bench.attention_ratios): gka fast vs
its reference (time >= 10x, memory >= 20x), every lag-bias configuration vs softmax-rope
(time <= 1.3x), gka and gka-lm vs softmax-rope (tokens/s >= 1.0x on CUDA; memory).
Both files are written atomically (a temporary file in the same folder, then os.replace).
A row whose step raises a RuntimeError (out of memory; an op with no kernel for the dtype,
e.g. torch.cdist in bfloat16 on CPU for the gka reference) is left out and listed at the
end; the files are still written and the exit status is 1.
Tests never assert timings; the CPU of a shared machine is noisy (notes: up to 4x).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..errors import UsageError
from .attention_configs import DEFAULT_CONFIGS, select_configs
from .attention_measure import DTYPES, IMPLS, SCHEMA, BenchSettings, plan, run_benchmark
from .attention_ratios import RATIO_SCHEMA, compute_ratios, format_ratios, format_table
from .timing import cpu_busy_fraction
from .typed_csv import read_rows as read_typed_rows, write_csv_atomic

DEFAULT_SEQ_LENS = (256, 1024, 2048)
QUICK_SEQ_LENS = (32, 64)


# ----------------------------------------------------------------------------- files
def read_rows(path: Path, schema: dict[str, type] = SCHEMA) -> list[dict[str, Any]]:
    """Rows of a CSV written by this stage, typed by `schema` (ValueError on a bad header/value)."""
    return read_typed_rows(path, schema)


def ratios_path(out: Path) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}_ratios{out.suffix or '.csv'}")


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
