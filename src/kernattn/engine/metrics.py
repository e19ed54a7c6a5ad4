"""metrics.jsonl, the durable record of a run, and its mirror in MLflow.

Every line is one JSON object appended whole (kernattn.io.LineAppender): {"step", "split":
"train"|"val", ...the track's fields..., "elapsed_s", "<unit>_per_s"}; a divergence ends the
file with {"step", "status": "FAILED", "error", "checkpoint_step"}. A checkpoint counts the
lines it covers; the lines are fsynced before it is written, and a resume cuts the file back
to that count (the steps after it are replayed and written again).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..io import LineAppender, atomic_write_text, read_lines

# Keys of a line that are bookkeeping, not metrics.
NOT_METRICS = ("step", "split", "epoch", "status", "error", "checkpoint_step", "tokens", "flops", "elapsed_s")


def is_timing(key: str) -> bool:
    """Keys that depend on the machine's speed (a resumed run differs from a whole one there)."""
    return key == "elapsed_s" or key.endswith("_per_s")


def metric_dict(line: dict[str, Any]) -> dict[str, float]:
    """One metrics.jsonl line -> MLflow metrics, the same rule for every track: '<split>_<key>'
    (train_loss, val_top1, ...), except the train line's rates and learning rate, logged bare
    (lr, tokens_per_s, img_per_s); a val line's run-average rate is not a metric."""
    split = line.get("split")
    if split is None:
        return {}
    out = {}
    for key, value in line.items():
        if key in NOT_METRICS or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        bare = key == "lr" or is_timing(key)
        if bare and split != "train":
            continue
        out[key if bare else f"{split}_{key}"] = float(value)
    return out


class MetricsLog:
    """metrics.jsonl of a run folder, cut back to the lines a checkpoint counts, mirrored to a
    tracker (which drops points it already holds, so a replay never duplicates them)."""

    def __init__(self, path: Path, keep: int | None, tracker):
        self.path, self.tracker = Path(path), tracker
        old = read_lines(self.path) if keep and self.path.is_file() else []
        self.kept = old[:keep] if keep else []
        atomic_write_text(self.path, "".join(line + "\n" for line in self.kept))
        self.lines = len(self.kept)
        self._fh = LineAppender(self.path)

    def replay_to_tracker(self) -> None:
        """Send the kept lines' points the MLflow run may lack (a resumed or re-opened run)."""
        for line in self.kept:
            rec = json.loads(line)
            self.tracker.log_metrics(metric_dict(rec), rec["step"])
        self.tracker.flush()

    def write(self, rec: dict[str, Any]) -> None:
        self._fh.write(json.dumps(rec))
        self.lines += 1
        self.tracker.log_metrics(metric_dict(rec), rec["step"])

    def write_failure(self, rec: dict[str, Any]) -> None:
        """The run's last line (not counted: a resume from the checkpoint cuts it)."""
        if not self._fh.closed:
            self._fh.write(json.dumps(rec))

    def fsync(self) -> None:
        self._fh.fsync()

    def close(self) -> None:
        self._fh.close()
