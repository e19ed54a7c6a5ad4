"""A row's check process under a memory ceiling, and how it ended, in words.

The preflight runs on login nodes that other people share, so each row's process is held
under a ceiling (`Ceiling`): `--max-memory` (12 GiB by default), lowered to 90% of the memory
this machine has available when the preflight starts. The parent polls the child's resident
memory and stops it at the ceiling, which names its cause, instead of leaving the kernel's
OOM killer to end it (or a neighbour's job) with a bare exit status of -9.

The peak a row reports is its process's own high-water mark. The kernel's count for a child
(`wait4`'s ru_maxrss) survives a SIGKILL but starts from the parent's: a child is forked from
the parent and exec carries the forked memory's high-water mark over (Linux's exec_mmap). So
that count is the child's when it is above the parent's own mark, and otherwise the child's
VmHWM as last polled (or as the check reports it on exit: rowcheck.py). The polling, every
POLL_S, is also the guard: a process allocating quickly may pass the ceiling by a little
before it is stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

GIB = 2 ** 30
POLL_S = 0.2
AVAILABLE_SHARE = 0.9  # of MemAvailable: the page cache and the other users keep the rest
DEFAULT_MAX_GIB = 12.0


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def mem_available(meminfo: str | None = None) -> int | None:
    """MemAvailable in bytes (from /proc/meminfo, or its text); None where there is none."""
    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            return None
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024  # kB
    return None


def resident(pid: int | str = "self") -> tuple[int, int]:
    """A live process's (resident bytes, their high-water mark): VmRSS, VmHWM; zeros once it is gone."""
    found = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line[:5]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return found.get("VmRSS", 0), found.get("VmHWM", 0)


@dataclass(frozen=True)
class Ceiling:
    """The most resident memory one row's process may reach."""
    limit: int               # bytes
    asked: int               # --max-memory, bytes
    available: int | None    # MemAvailable when the preflight started

    @classmethod
    def here(cls, max_gib: float, meminfo: str | None = None) -> "Ceiling":
        asked, available = int(max_gib * GIB), mem_available(meminfo)
        limit = asked if available is None else min(asked, int(AVAILABLE_SHARE * available))
        return cls(limit, asked, available)

    def text(self) -> str:
        there = "" if self.available is None else f"; {gib(self.available)} available here"
        if self.limit < self.asked:
            return (f"{gib(self.limit)} (90% of the memory available here, {gib(self.available or 0)}; "
                    f"--max-memory asked {gib(self.asked)})")
        return f"{gib(self.limit)} (--max-memory{there})"


@dataclass(frozen=True)
class Ended:
    code: int        # the exit status; -N: ended by signal N
    peak: int        # its peak resident bytes
    stopped: bool    # the preflight stopped it at the ceiling


def run_capped(argv: list[str], log_path: Path, limit: int | None) -> Ended:
    """Run `argv` (output to `log_path`), stopping it once its resident memory passes `limit`."""
    stopped, polled = False, 0
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss, high = resident(proc.pid)
            polled = max(polled, high)
            if limit and not stopped and rss > limit:
                os.kill(proc.pid, signal.SIGKILL)
                stopped = True
            time.sleep(POLL_S)
    proc.returncode = os.waitstatus_to_exitcode(status)
    kernel = usage.ru_maxrss * 1024  # kilobytes on Linux
    return Ended(proc.returncode, kernel if kernel > resident()[1] else polled, stopped)


def ended_text(end: Ended, ceiling: Ceiling, log_path: Path) -> str:
    """Why a row's process gave no result, with the memory it reached and the fix."""
    peak = f"after reaching {gib(end.peak)} resident"
    if end.stopped:
        return (f"stopped by the preflight {peak}, over its ceiling of {ceiling.text()}: rerun with a larger "
                f"--max-memory where this machine has room, or leave the row out (--rows); log {log_path}")
    if end.code == -signal.SIGKILL:
        free = "" if ceiling.available is None else f" ({gib(ceiling.available)} were available at the start)"
        return (f"killed by the OS (SIGKILL, likely out of memory) {peak}{free}: run the preflight where more "
                f"memory is free, or with a lower --max-memory (deep rows then step slices only); log {log_path}")
    if end.code < 0:
        return f"killed by signal {signal.Signals(-end.code).name} {peak}; log {log_path}"
    tail = (log_path.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
    return f"the check process exited {end.code} {peak} ({tail}); log {log_path}"
