"""A preflight result: one line per item, with its status."""

from __future__ import annotations

from dataclasses import dataclass, field

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"


@dataclass(frozen=True)
class Item:
    check: str      # data | step | memory | slurm
    subject: str    # a data set, track/row, stage
    status: str     # OK, WARN (needs a look, does not fail the preflight), FAIL, SKIP (not checkable here)
    text: str
    values: dict = field(default_factory=dict)  # the measured numbers (--json)

    def line(self) -> str:
        return f"{self.status:<4}  {self.check:<6}  {self.subject}: {self.text}"
