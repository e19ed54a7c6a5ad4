"""A training session's outputs around the loop: config.json, the MLflow run, metrics.jsonl,
the progress bar, final.json (last) and the one-line divergence report.

A session is opened from a value (Opening: what the loop knows when it starts) and owns what
it opens: the MLflow run (its id, which the checkpoint records and final.json names) and
metrics.jsonl (its line count, which the checkpoint records). The loop's counters reach it as
arguments (finish), never by reading the loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..io import atomic_write_json
from ..tracking.client import Tracker, live_view
from .dist import Layout
from .metrics import MetricsLog
from .mlrun import TAG_KEYS, experiment_name, mlflow_params, source_tags, tracking_for
from .rundir import CONFIG, FINAL, METRICS
from .runtime import git_info


@dataclasses.dataclass(frozen=True)
class Opening:
    """What a session opens with: the run's fingerprint and plugin records, where it trains
    (config.json's machine fields, `machine`) and where its checkpoint left it."""
    fingerprint: str
    plugins: list[dict[str, Any]]
    machine: dict[str, Any]
    resumed_at: int | None = None      # the checkpoint's step; None: from scratch
    metrics_lines: int = 0             # lines of metrics.jsonl the checkpoint counts (kept, the rest cut)
    mlflow_run_id: str | None = None   # the checkpoint's MLflow run, reopened
    progress: bool = True


def machine(device: torch.device, dtype: str, compiled: bool, layout: Layout) -> dict[str, Any]:
    """config.json's description of where and how the run trains."""
    cuda = device.type == "cuda"
    return {"device": device.type,
            "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine(),
            "effective": {"dtype": "bfloat16" if cuda and dtype == "bfloat16" else "float32",
                          "compile": compiled, "threads": torch.get_num_threads()},
            "world_size": layout.world.size, "micro_batch": layout.micro_batch, "grad_accum": layout.grad_accum,
            "torch_version": torch.__version__, "python_version": platform.python_version()}


def _user() -> str | None:
    """Who runs it (MLflow's mlflow.user); None where the system cannot say (a container's uid)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _previous_mlflow_run(run_dir: Path, fingerprint: str) -> str | None:
    """The MLflow run of a session that died before its first checkpoint (same fingerprint
    only): reused, and the replayed steps it already holds are not logged twice."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        old = json.loads((run_dir / CONFIG).read_text())
        if old.get("fingerprint") == fingerprint:
            return (old.get("tracking") or {}).get("mlflow_run_id")
    return None


class Session:
    def __init__(self, track, opening: Opening):
        self.track, self.run_dir = track, track.run_dir
        params, resumed = track.params, opening.resumed_at is not None
        self.commit, dirty = git_info()
        plugins = opening.plugins
        self.ident = {"track": track.name, **track.identity(), "scale": params.scale,
                      "params_digest": params.digest(), "fingerprint": opening.fingerprint,
                      "git_commit": self.commit, "device": opening.machine["device"],
                      # the code of a plugin's variant: its source and the sha256 of its file
                      **({"plugin": f"{plugins[0]['source']} sha256:{plugins[0]['sha256']}"} if plugins else {})}
        experiment = experiment_name(track.experiment_section, track.name, params.scale)
        self.tracking = tracking_for(params.tracking, experiment)
        self.tracker = Tracker(live_view(self.tracking))  # tracking.live false: sync_mlflow uploads it later
        self.log = MetricsLog(self.run_dir / METRICS, opening.metrics_lines, self.tracker)
        config = {"track": track.name, "command": track.command, "scale": params.scale, "params_path": str(params.path),
                  "params_digest": self.ident["params_digest"], "fingerprint": opening.fingerprint,
                  **track.config(), **({"plugins": plugins} if plugins else {}), **opening.machine,
                  "git_commit": self.commit, "git_dirty": dirty, "resumed_from_step": opening.resumed_at}
        self.mlflow_run_id = opening.mlflow_run_id
        if self.mlflow_run_id is None and not resumed:
            self.mlflow_run_id = _previous_mlflow_run(self.run_dir, opening.fingerprint)
        # MLflow's own system tags (its UI's source and commit columns), beside ours
        tags = {**source_tags(track.command, self.commit), "mlflow.user": _user(),
                **{k: v for k, v in self.ident.items() if k in TAG_KEYS}}
        rid = self.tracker.start(name=track.run_id, tags=tags, params=mlflow_params(config),
                                 resume_run_id=self.mlflow_run_id)
        if rid is not None:
            self.mlflow_run_id = rid
            self.log.replay_to_tracker()
        config["tracking"] = {"enabled": self.tracking.enabled, "live": getattr(self.tracking, "live", True),
                              "uri": self.tracking.uri,
                              "experiment": experiment, "mlflow_run_id": self.mlflow_run_id}
        atomic_write_json(self.run_dir / CONFIG, config, sort_keys=False)
        where = f"resuming at step {opening.resumed_at}" if resumed else "from scratch"
        print(f"kernattn {track.command}: {track.run_id}: {track.describe_start()}, device "
              f"{opening.machine['device']}, {where}", flush=True)
        self.bar = _progress_bar(track, opening.resumed_at or 0, opening.progress)

    def say(self, message: str) -> None:
        self.bar.write(message)

    def finish(self, st) -> None:
        """Artifacts, the MLflow run FINISHED, then final.json (the stage's output) last; `st`:
        the loop's counters after the last step (checkpoint.LoopState)."""
        track = self.track
        self.log.close()
        track.finish(self.run_dir)
        final = {**self.ident, **track.final(st), "steps": st.step, "wall_s": st.elapsed_s, "train_s": st.train_s,
                 "mlflow_run_id": self.mlflow_run_id,
                 # the report links the experiment's runs page by its id (MLflow's UI routes by id)
                 "mlflow_experiment_id": self.tracker.experiment_id if self.mlflow_run_id else None,
                 "tracking_uri": self.tracking.uri if self.mlflow_run_id else None}
        self.tracker.set_tags(track.final_tags(final))
        self.tracker.log_artifacts([self.run_dir / CONFIG, self.run_dir / METRICS])
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / FINAL
            staged.write_text(json.dumps(final, indent=2) + "\n")
            self.tracker.log_artifact(staged)
        self.tracker.end("FINISHED")
        atomic_write_json(self.run_dir / FINAL, final, sort_keys=False)
        self.say(f"kernattn {track.command}: {track.run_id}: done, {track.describe_final(final)} after "
                 f"{st.step} steps, {st.elapsed_s:.1f} s")

    def fail(self, exc, ckpt_step: int | None, ckpt_path: Path) -> None:
        """A divergence: one line on stderr, a FAILED record, the MLflow run tagged `failure`."""
        track = self.track
        kept = (f"the last good checkpoint (step {ckpt_step}) is kept at {ckpt_path}" if ckpt_step is not None
                else "no checkpoint had been written")
        message = (f"{track.run_id}: {exc}; training stopped, {kept}; {track.divergence_fix()}, "
                   f"then rerun with --fresh")
        self.log.write_failure({"step": exc.step, "status": "FAILED", "error": str(exc),
                                "checkpoint_step": ckpt_step})
        self.tracker.set_tags({"failure": message[:500]})
        self.bar.close()
        print(f"kernattn {track.command}: error: {message}", file=sys.stderr, flush=True)

    def close(self, status: str) -> None:
        self.log.close()
        self.bar.close()
        if status != "FINISHED":
            self.tracker.end(status)


def _progress_bar(track, initial: int, enabled: bool):
    from tqdm.auto import tqdm

    tty = sys.stderr.isatty()
    return tqdm(total=track.max_steps, initial=initial, desc=track.run_id, disable=not enabled,
                mininterval=0.5 if tty else 30.0, dynamic_ncols=True, file=sys.stderr)


class _Nothing:
    """Accepts any call and does nothing: the tracker and progress bar of a rank other than 0."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class _CountedLog:
    """metrics.jsonl's line count without the file: a rank other than 0 keeps the counters
    rank 0 keeps, so every rank takes the same branches."""

    def __init__(self, lines: int):
        self.lines = lines

    def write(self, rec) -> None:
        self.lines += 1

    def write_failure(self, rec) -> None:
        pass

    def fsync(self) -> None:
        pass

    def close(self) -> None:
        pass


class QuietSession:
    """The session of a rank other than 0 under data parallelism: it writes nothing (rank 0
    alone writes the run folder, final.json and the MLflow run) and says nothing."""

    def __init__(self, opening: Opening):
        self.log = _CountedLog(opening.metrics_lines)
        self.tracker = self.bar = _Nothing()
        self.mlflow_run_id = opening.mlflow_run_id

    def say(self, message: str) -> None:
        pass

    def finish(self, st) -> None:
        pass

    def fail(self, exc, ckpt_step, ckpt_path) -> None:
        pass

    def close(self, status: str) -> None:
        pass
