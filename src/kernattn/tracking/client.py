"""MLflow tracking for training runs, built so that it can never stop a training run.

    tracker = Tracker(params.tracking)
    tracker.start(name="rope-s0", tags={...}, params=flatten(config), resume_run_id=None)
    tracker.log_metrics({"val_loss": 1.2}, step=100)   # buffered
    tracker.flush()                                     # one log_batch call
    tracker.log_artifact("results/runs/rope-s0/config.json")
    tracker.end("FINISHED")                             # or "FAILED" / "KILLED"

Rules:
- Every MLflow call goes through `_call`: SQLite's "database is locked" (two processes
  writing one store) is retried with a short backoff (about 10 s in all); any other error,
  or a lock that does not clear, prints ONE warning and switches tracking off for the rest
  of the process. metrics.jsonl in the run folder stays the durable record.
- `tracking.enabled: false` in params.yaml: nothing is imported or called.
- sqlite:///path stores: the parent folder is created, and the schema plus the experiment
  are created under an exclusive `fcntl.flock` on `<db>.lock`, so two processes starting
  on a fresh store do not race on MLflow's schema creation (a known trap, see
  shared/notes/infrastructure.md). A new experiment gets `tracking.artifact_root` (as an
  absolute file path) as its artifact location.
- The experiment, new or found (a deleted one is restored), is tagged as model training
  (mlflow.experimentKind = custom_model_development) unless it has a kind already;
  `experiment_runs_url(ui, experiment_id)` links to its runs in the UI's Model training view.
- http(s):// servers: a TCP connect (3 s) is tried first, so an unreachable server costs
  seconds, not MLflow's default request retries (minutes); the retry env variables are set
  to short values unless the user set them.
- Resume: `start(resume_run_id=...)` reopens that MLflow run (status back to RUNNING) and
  reads its metric histories; a later `log_metrics` for a key at a step not above the last
  logged one is dropped, so replaying steps after a crash never duplicates points.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urlparse

PARAM_VALUE_MAX = 6000  # MLflow's limit on a param value
BATCH_METRICS = 1000    # MLflow's limit per log_batch
SYSTEM_METRICS_INTERVAL = 10  # seconds between system-metric samples
BATCH_PARAMS = 100
LOCK_RETRIES = 8        # 0.1 s doubling up to 2 s: about 10 s before giving up
# MLflow 3's experiment kind: "custom_model_development" is model training, "genai_development"
# GenAI apps (mlflow 3.17: the UI's ExperimentKind enum, mlflow/server/js; the onboarding skill,
# mlflow/assistant/skills/mlflow-onboarding/SKILL.md). MLflow 3.17's UI opens an experiment in
# the view of its GenAI / Model training switch (default GenAI, or the URL's workflowType) and
# not by this tag, so links into the UI carry workflowType (experiment_runs_url).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
UI_WORKFLOW = "machine_learning"  # the UI's workflowType for its Model training view


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"model": {"d_model": 512}} -> {"model.d_model": "512"} (lists / tuples as JSON-ish text)."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = str(list(value) if isinstance(value, tuple) else value)
    return out


def experiment_runs_url(ui_base: str, experiment_id: str) -> str:
    """The runs page of experiment `experiment_id` in the MLflow UI at `ui_base` (e.g.
    http://127.0.0.1:5000): <ui_base>/#/experiments/<id>/runs?workflowType=machine_learning,
    the table of runs in the UI's Model training view (without workflowType, MLflow 3.17 shows
    the same table under its GenAI menu, and the experiment's own page opens its GenAI overview)."""
    return f"{ui_base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType={UI_WORKFLOW}"


# Where the DAG's sync_mlflow stage (tracking.live false) records the MLflow run of every run folder
# it uploaded, instead of rewriting the trainings' final.json (another job's output).
SYNCED_RECORD = "results/{scale}/mlflow/synced.json"


def synced_record(scale: str) -> Path:
    return Path(SYNCED_RECORD.format(scale=scale))


def read_synced(scale: str) -> dict[str, dict]:
    """{run folder: {mlflow_run_id, mlflow_experiment_id, tracking_uri}} of the scale's last
    sync_mlflow stage; {} when there was none (live tracking, or not synced yet)."""
    import json

    try:
        return json.loads(synced_record(scale).read_text())
    except (OSError, ValueError):
        return {}


def live_view(tracking_params):
    """The tracking params a training uses: tracking.live false switches its own MLflow run off (the
    DAG's sync_mlflow stage uploads the run folder afterwards)."""
    import dataclasses
    from types import SimpleNamespace

    if getattr(tracking_params, "live", True):
        return tracking_params
    if dataclasses.is_dataclass(tracking_params):
        return dataclasses.replace(tracking_params, enabled=False)
    return SimpleNamespace(**{**vars(tracking_params), "enabled": False})


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (relative to the current folder), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):])


@contextlib.contextmanager
def file_lock(path: Path):
    """Exclusive advisory lock on `path` (created if missing) for the `with` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _is_locked_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return "database is locked" in text or "database table is locked" in text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _print_warning(message: str) -> None:
    print(f"kernattn: warning: {message}", file=sys.stderr, flush=True)


class Tracker:
    """A best-effort MLflow run. Public methods never raise (except programming errors)."""

    def __init__(self, tracking_params, warn: Callable[[str], None] | None = None):
        self.params = tracking_params
        self.uri: str = tracking_params.uri
        self.enabled: bool = bool(tracking_params.enabled)
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.warnings: list[str] = []
        self._warn = warn or _print_warning
        self._client = None
        self._buffer: list[Any] = []
        self._last_step: dict[str, int] = {}
        self._system = None  # MLflow's SystemMetricsMonitor, while a run is open

    # ------------------------------------------------------------------ state
    @property
    def active(self) -> bool:
        return self.enabled and self.run_id is not None

    def _disable(self, what: str, exc: BaseException | str) -> None:
        if not self.enabled:
            return
        self.enabled = False
        reason = exc if isinstance(exc, str) else _first_line(exc)
        message = (f"MLflow tracking at {self.uri} is off for the rest of this run ({what} failed: "
                   f"{reason}); metrics.jsonl in the run folder is the record")
        self.warnings.append(message)
        self._warn(message)

    def _call(self, what: str, fn: Callable, *args, **kwargs):
        """fn(*args, **kwargs), retrying SQLite lock errors; None (and tracking off) on failure."""
        if not self.enabled:
            return None
        delay = 0.1
        for attempt in range(LOCK_RETRIES + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001  (tracking must never stop training)
                if _is_locked_error(exc) and attempt < LOCK_RETRIES:
                    time.sleep(delay)
                    delay = min(2 * delay, 2.0)
                    continue
                self._disable(what, exc)
                return None
        return None

    # ------------------------------------------------------------------ start
    def _probe_http(self) -> str | None:
        """None if the server's port accepts a TCP connection, else why not."""
        parsed = urlparse(self.uri)
        host = parsed.hostname or "127.0.0.1"
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            with socket.create_connection((host, port), timeout=3.0):
                return None
        except OSError as exc:
            return f"cannot connect to {host}:{port} ({exc.strerror or exc})"

    def _connect(self) -> None:
        """Client + experiment (under the file lock for sqlite stores)."""
        for key, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
                           ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                           ("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")):
            os.environ.setdefault(key, value)
        from mlflow import MlflowClient

        db = sqlite_path(self.uri)
        if db is None:
            self._client = MlflowClient(tracking_uri=self.uri)
            self._open_experiment(artifact_root=None)  # the server picks the artifact location
            return
        db.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(db.with_name(db.name + ".lock")):
            self._client = MlflowClient(tracking_uri=self.uri)  # creates/migrates the schema
            self._open_experiment(artifact_root=Path(self.params.artifact_root).resolve())

    def _open_experiment(self, artifact_root: Path | None) -> None:
        """Get or create the experiment `tracking.experiment` (a new one with `artifact_root` as
        its artifact location when given), restore it when deleted, and tag it as model training
        (EXPERIMENT_KIND_TAG) unless it already has a kind."""
        client, name = self._client, self.params.experiment
        exp = client.get_experiment_by_name(name)
        if exp is None:
            if artifact_root is not None:
                artifact_root.mkdir(parents=True, exist_ok=True)
            try:
                self.experiment_id = client.create_experiment(
                    name, artifact_location=None if artifact_root is None else str(artifact_root),
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
                return
            except Exception:  # noqa: BLE001  (created meanwhile by another process)
                exp = client.get_experiment_by_name(name)
                if exp is None:
                    raise
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        self.experiment_id = exp.experiment_id
        if EXPERIMENT_KIND_TAG not in exp.tags:  # made before kernattn tagged, or by hand
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)

    def start(self, *, name: str, tags: dict[str, Any], params: dict[str, Any],
              resume_run_id: str | None = None) -> str | None:
        """Open (or reopen) the MLflow run; returns its id, or None when tracking is off."""
        if not self.enabled:
            return None
        if urlparse(self.uri).scheme in ("http", "https"):
            problem = self._probe_http()
            if problem:
                self._disable("connecting", problem)
                return None
        if self._call("opening the store", self._connect) is None and not self.enabled:
            return None
        client = self._client
        if resume_run_id:
            run = self._call("reading the run to resume", self._get_run_or_none, resume_run_id)
            if not self.enabled:
                return None
            if run is not None and run.info.lifecycle_stage != "deleted":
                self.run_id = resume_run_id
                self._call("reopening the run", client.update_run, resume_run_id, status="RUNNING")
                for key in run.data.metrics:
                    history = self._call("reading metric history", client.get_metric_history,
                                         resume_run_id, key) or []
                    if history:
                        self._last_step[key] = max(m.step for m in history)
                self._start_system_metrics(resume=True)
                return self.run_id if self.enabled else None
        str_tags = {k: str(v) for k, v in tags.items() if v is not None}
        run = self._call("creating the run", client.create_run, self.experiment_id, tags=str_tags, run_name=name)
        if run is None:
            return None
        self.run_id = run.info.run_id
        self.log_params(params)
        self._start_system_metrics(resume=False)
        return self.run_id if self.enabled else None

    def _start_system_metrics(self, resume: bool) -> None:
        """CPU/GPU/memory/disk every SYSTEM_METRICS_INTERVAL s, by MLflow's own monitor thread
        (system/* metrics), where tracking.system_metrics asks for them. Off when
        MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=false or psutil is missing; a failure here only costs the system metrics."""
        if not getattr(self.params, "system_metrics", False):
            return  # tracking.system_metrics: only where asked
        if os.environ.get("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "").lower() in ("false", "0"):
            return
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self._system = SystemMetricsMonitor(self.run_id, sampling_interval=SYSTEM_METRICS_INTERVAL,
                                                resume_logging=resume, tracking_uri=self.uri)
            self._system.start()
        except Exception as exc:  # noqa: BLE001  (psutil missing, monitor API changed, ...)
            self._system = None
            message = f"MLflow system metrics off: {_first_line(exc)}"
            self.warnings.append(message)
            self._warn(message)

    def _get_run_or_none(self, run_id: str):
        from mlflow.exceptions import MlflowException

        try:
            return self._client.get_run(run_id)
        except MlflowException as exc:
            if _is_locked_error(exc):
                raise
            return None

    # ------------------------------------------------------------------ logging
    def log_params(self, params: dict[str, Any]) -> None:
        if not self.active:
            return
        from mlflow.entities import Param

        items = [Param(str(k)[:250], str(v)[:PARAM_VALUE_MAX]) for k, v in params.items()]
        for i in range(0, len(items), BATCH_PARAMS):
            self._call("logging params", self._client.log_batch, self.run_id, params=items[i:i + BATCH_PARAMS])

    def set_tags(self, tags: dict[str, Any]) -> None:
        if not self.active:
            return
        from mlflow.entities import RunTag

        items = [RunTag(str(k), str(v)) for k, v in tags.items() if v is not None]
        self._call("setting tags", self._client.log_batch, self.run_id, tags=items)

    def log_metrics(self, metrics: dict[str, float], step: int, timestamp_ms: int | None = None) -> None:
        """Buffer metrics at `step` (sent by `flush`); steps already logged (resume) are skipped."""
        if not self.active:
            return
        from mlflow.entities import Metric

        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        for key, value in metrics.items():
            if value is None or step <= self._last_step.get(key, -1):
                continue
            self._buffer.append(Metric(key, float(value), ts, int(step)))
            self._last_step[key] = step

    def flush(self) -> None:
        if not self.active or not self._buffer:
            self._buffer.clear()
            return
        pending, self._buffer = self._buffer, []
        for i in range(0, len(pending), BATCH_METRICS):
            if self._call("logging metrics", self._client.log_batch, self.run_id,
                          metrics=pending[i:i + BATCH_METRICS]) is None and not self.enabled:
                return

    def log_artifact(self, path: str | os.PathLike, name: str | None = None) -> None:
        """Upload a file (as `name` when given: copied into a temp folder under that name)."""
        if not self.active:
            return
        path = Path(path)
        if name is None or name == path.name:
            self._call("logging an artifact", self._client.log_artifact, self.run_id, str(path))
            return
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / name
            target.write_bytes(path.read_bytes())
            self._call("logging an artifact", self._client.log_artifact, self.run_id, str(target))

    def log_artifacts(self, paths: Iterable[str | os.PathLike]) -> None:
        for p in paths:
            if Path(p).is_file():
                self.log_artifact(p)

    def end(self, status: str = "FINISHED") -> None:
        """Flush and mark the run FINISHED / FAILED / KILLED."""
        if not self.active:
            return
        if self._system is not None:
            with contextlib.suppress(Exception):
                self._system.finish()  # publishes its last sample
            self._system = None
        self.flush()
        self._call("ending the run", self._client.set_terminated, self.run_id, status=status)
