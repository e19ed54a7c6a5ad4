"""The one place that installs the SIGTERM handler, for every track.

SIGTERM (SLURM's time limit, a preemption) asks the loop to finish its step, checkpoint and
exit 143; the rerun resumes. KERNATTN_DEBUG_HOLD_AT_STEP=N (tests) makes a run wait after
step N until it is killed or gets SIGTERM, so a crash can be placed at a known step.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

HOLD_ENV = "KERNATTN_DEBUG_HOLD_AT_STEP"
EXIT_SIGTERM = 143


class StopSignal:
    """`with StopSignal() as stop:` ... `stop.requested` turns True on SIGTERM (main thread only:
    Python delivers signals there, and a handler cannot be installed from another thread).
    `on_signal(signum)`, when given, is called as well (the launcher passes it on to torchrun),
    and so is the StopSignal this one replaced, if any (no other handler: a library's could
    exit): a command that trains several runs in a row holds one StopSignal around them, which
    a SIGTERM during a run reaches too."""

    def __init__(self, on_signal: Callable[[int], None] | None = None):
        self.requested = False
        self._previous = None
        self._on_signal = on_signal

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = True
        if self._on_signal is not None:
            self._on_signal(signum)
        outer = getattr(self._previous, "__self__", None)
        if isinstance(outer, StopSignal):  # a StopSignal around this one sees the signal too (kernattn prune)
            outer._handle(signum, frame)

    def __exit__(self, *exc) -> bool:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        return False


def hold_at_step() -> int | None:
    value = os.environ.get(HOLD_ENV, "").strip()
    return int(value) if value.isdigit() else None


def hold(command: str, run_id: str, step: int, stopped: Callable[[], bool]) -> None:
    """Wait (tests) until SIGKILL or until `stopped()` (SIGTERM here, or on any rank: a
    collective each call, so every rank holds in step), after saying so on stderr."""
    print(f"kernattn {command}: {run_id}: holding after step {step} ({HOLD_ENV})", file=sys.stderr, flush=True)
    while not stopped():
        time.sleep(0.02)


NONFINITE_ENV = "KERNATTN_DEBUG_NONFINITE_AT"


def nonfinite_at(rank: int, step: int) -> bool:
    """KERNATTN_DEBUG_NONFINITE_AT=R:S (tests): rank R's training loss of step S turns nan,
    the other ranks' staying finite."""
    value = os.environ.get(NONFINITE_ENV, "")
    return value == f"{rank}:{step}"
