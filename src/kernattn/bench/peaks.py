"""Peak FLOP/s of the accelerators the project plans for and measures on (bench/gpus.yaml, with
the data sheet each number comes from), and a measured peak for a CPU, which has no single
honest one: the float32 matmul rate of this machine at the given thread count.

No torch at import: `kernattn plan` reads the table before it builds any model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..yaml_text import safe_load

TABLE = Path(__file__).with_name("gpus.yaml")
CPU = "cpu"


@dataclass(frozen=True)
class Kind:
    name: str               # h100, a100, ...
    match: tuple[str, ...]  # substrings of torch.cuda.get_device_name
    bf16: float             # dense bf16 peak, FLOP/s
    mfu: float              # the default MFU of `kernattn plan` (stated, not measured)
    source: str
    memory_gib: float = 0.0  # the card's memory (data sheet): `kernattn preflight` fits micro-batches in it


@lru_cache(maxsize=1)
def kinds() -> dict[str, Kind]:
    doc = safe_load(TABLE.read_text())["kinds"]
    return {name: Kind(name, tuple(v["match"]), float(v["bf16"]), float(v["mfu"]), v["source"],
                 float(v.get("memory_gib", 0.0)))
            for name, v in doc.items()}


def kind_for_name(device_name: str) -> Kind | None:
    """The kind whose first matching substring is in `device_name` (file order), or None."""
    return next((k for k in kinds().values() if any(m in device_name for m in k.match)), None)


def get_kind(name: str) -> Kind:
    """The kind called `name` (h100, a100, ...); a one-line error naming the known kinds."""
    from ..errors import UsageError

    table = kinds()
    if name not in table:
        raise UsageError(f"unknown GPU kind {name!r}; known kinds: {', '.join([*table, CPU])} "
                         f"(peaks in {TABLE.relative_to(TABLE.parents[2])})")
    return table[name]


def measure_cpu_peak(threads: int = 1, size: int = 512, reps: int = 5) -> float:
    """This CPU's float32 matmul FLOP/s at `threads` threads: the best of `reps` timings of a
    size x size product, repeated enough to take ~tens of milliseconds (the ceiling a model's
    matmuls can reach here). Timed in this process's CPU time per thread: the rate of dedicated
    cores, as a cluster gives a job, however loaded this machine is (wall time would count the
    other processes sharing its cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        inner = 8
        torch.mm(a, b)
        best = float("inf")
        for _ in range(reps):
            t0 = time.process_time()
            for _ in range(inner):
                torch.mm(a, b)
            best = min(best, (time.process_time() - t0) / threads / inner)
        return 2.0 * size**3 / best
    finally:
        torch.set_num_threads(before)
